//! Validating admission webhooks, each behaviour as kube-apiserver shows it: configurations
//! stored, defaulted and validated; webhooks called over HTTPS (verified against `caBundle`)
//! through `clientConfig.url` or a Service; AdmissionReview v1 contents; refusals worded
//! `admission webhook "NAME" denied the request: MESSAGE` with the webhook's code, as kubectl
//! prints them; `failurePolicy`, `timeoutSeconds`, selectors, dry-run; `kubectl drain` retrying
//! a webhook's 429 on evictions. The webhook servers are tiny in-test HTTPS servers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kubelet_support;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube_sim::SimHandle;
use kubelet_support::*;
use serde_json::{Value, json};
use tokio_rustls::rustls;

// ---------------------------------------------------------------------------------------------
// An in-test HTTPS webhook server.

/// What the webhook answers: a `response` (uid added), or a raw HTTP reply.
enum Reply {
    Response(Value),
    Raw(u16, String),
}

type Handler = Arc<dyn Fn(Value) -> Pin<Box<dyn Future<Output = Reply> + Send>> + Send + Sync>;

fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    Arc::new(move |v| Box::pin(f(v)))
}

fn allow() -> Handler {
    handler(|_| async { Reply::Response(json!({"allowed": true})) })
}

fn deny(code: u16, message: &'static str) -> Handler {
    handler(
        move |_| async move { Reply::Response(json!({"allowed": false, "status": {"code": code, "message": message}})) },
    )
}

/// A CA and a serving certificate it signed.
struct Certs {
    ca_pem: String,
    cert_der: Vec<u8>,
    key_der: Vec<u8>,
}

fn certs(names: &[&str]) -> Certs {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "kube-sim test CA");
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let params = rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    Certs { ca_pem: ca.pem(), cert_der: cert.der().to_vec(), key_der: key.serialize_der() }
}

/// The names every test server's certificate is valid for: the loopback address
/// (`clientConfig.url`) and the service `gate.webhooks.svc` (`clientConfig.service`).
const SERVED_NAMES: &[&str] = &["127.0.0.1", "localhost", "gate.webhooks.svc"];

struct WebhookServer {
    addr: SocketAddr,
    ca_pem: String,
    handler: Arc<Mutex<Handler>>,
    reviews: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl WebhookServer {
    async fn start(h: Handler) -> Result<Self> {
        Self::start_with(h, certs(SERVED_NAMES)).await
    }

    async fn start_with(h: Handler, certs: Certs) -> Result<Self> {
        Self::start_tls(h, certs, None).await
    }

    /// A server that completes a handshake only with a client certificate signed by `client_ca`.
    async fn start_tls(h: Handler, certs: Certs, client_ca: Option<Vec<u8>>) -> Result<Self> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder =
            rustls::ServerConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()?;
        let builder = match client_ca {
            Some(der) => {
                let mut roots = rustls::RootCertStore::empty();
                roots.add(rustls::pki_types::CertificateDer::from(der))?;
                let verifier =
                    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build()?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let config = builder.with_single_cert(
            vec![rustls::pki_types::CertificateDer::from(certs.cert_der.clone())],
            rustls::pki_types::PrivateKeyDer::Pkcs8(certs.key_der.clone().into()),
        )?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let handler = Arc::new(Mutex::new(h));
        let reviews = Arc::new(Mutex::new(Vec::new()));
        let (h2, r2) = (handler.clone(), reviews.clone());
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, handler, reviews) = (acceptor.clone(), h2.clone(), r2.clone());
                // Connections are tasks of this task: stopping the server closes them too.
                connections.spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (handler, reviews) = (handler.clone(), reviews.clone());
                        async move {
                            let query = req.uri().query().unwrap_or("").to_string();
                            let body = axum::body::to_bytes(axum::body::Body::new(req.into_body()), 1 << 22)
                                .await
                                .unwrap_or_default();
                            let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                            let mut recorded = review.clone();
                            recorded["query"] = json!(query);
                            reviews.lock().unwrap().push(recorded);
                            let h = handler.lock().unwrap().clone();
                            let (status, body) = match h(review.clone()).await {
                                Reply::Response(mut r) => {
                                    r["uid"] = review["request"]["uid"].clone();
                                    let out = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": r});
                                    (200, out.to_string())
                                }
                                Reply::Raw(status, body) => (status, body),
                            };
                            let mut resp = hyper::Response::new(axum::body::Body::from(body));
                            *resp.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                            resp.headers_mut().insert("content-type", "application/json".parse().unwrap());
                            Ok::<_, std::convert::Infallible>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Ok(Self { addr, ca_pem: certs.ca_pem, handler, reviews, task })
    }

    fn set(&self, h: Handler) {
        *self.handler.lock().unwrap() = h;
    }

    /// The AdmissionReview requests received so far (`query`: the URL's query string).
    fn reviews(&self) -> Vec<Value> {
        self.reviews.lock().unwrap().clone()
    }

    fn clear(&self) {
        self.reviews.lock().unwrap().clear();
    }

    fn ca_bundle(&self) -> String {
        data_encoding::BASE64.encode(self.ca_pem.as_bytes())
    }

    fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    fn stop(self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers.

async fn sim() -> Result<SimHandle> {
    start().await
}

async fn api_sim() -> Result<SimHandle> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    kube_sim::start(kube_sim::SimConfig { kubelet: None, ..Default::default() }).await.context("starting kube-sim")
}

/// A ValidatingWebhookConfiguration with one webhook (created or replaced by [`apply`]).
fn configuration(name: &str, webhook: Value) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
           "metadata": {"name": name}, "webhooks": [webhook]})
}

/// One webhook entry reaching `server` at `clientConfig.url`.
fn url_webhook(name: &str, server: &WebhookServer, rules: Value) -> Value {
    json!({"name": name, "sideEffects": "None", "admissionReviewVersions": ["v1"], "rules": rules,
           "clientConfig": {"url": server.url("/validate"), "caBundle": server.ca_bundle()}})
}

fn rule(operations: &[&str], group: &str, resources: &[&str]) -> Value {
    json!([{"operations": operations, "apiGroups": [group], "apiVersions": ["*"], "resources": resources}])
}

async fn apply(sim: &SimHandle, obj: &Value) -> Result<()> {
    let client = sim.client().await;
    let api: Api<kube::api::DynamicObject> = Api::all_with(
        client,
        &kube::api::ApiResource {
            group: "admissionregistration.k8s.io".into(),
            version: "v1".into(),
            api_version: "admissionregistration.k8s.io/v1".into(),
            kind: "ValidatingWebhookConfiguration".into(),
            plural: "validatingwebhookconfigurations".into(),
        },
    );
    let name = obj["metadata"]["name"].as_str().context("name")?;
    let mut desired: kube::api::DynamicObject = serde_json::from_value(obj.clone())?;
    match api.get_opt(name).await? {
        // A full replacement, so that a test can switch e.g. from a service to a URL.
        Some(current) => {
            desired.metadata.resource_version = current.metadata.resource_version;
            api.replace(name, &PostParams::default(), &desired).await?;
        }
        None => {
            api.create(&PostParams::default(), &desired).await?;
        }
    }
    Ok(())
}

struct Kubectl {
    dir: PathBuf,
}

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// The kubeconfig and kubectl's cache live only as long as the test.
impl Drop for Kubectl {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Kubectl {
    fn new(sim: &SimHandle, prefix: &str) -> Result<Self> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos();
        let dir = std::env::temp_dir().join(format!("{prefix}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        sim.write_kubeconfig(&dir.join("kubeconfig"))?;
        Ok(Self { dir })
    }

    async fn run(&self, args: &[&str]) -> Result<Output> {
        self.run_with_stdin(args, None).await
    }

    async fn run_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> Result<Output> {
        use tokio::io::AsyncWriteExt;
        let mut cmd = tokio::process::Command::new("kubectl");
        cmd.arg("--kubeconfig").arg(self.dir.join("kubeconfig")).args(args).env("KUBECACHEDIR", self.dir.join("cache"));
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().context("running kubectl")?;
        if let Some(mut s) = child.stdin.take() {
            if let Some(text) = stdin {
                s.write_all(text.as_bytes()).await?;
            }
            drop(s);
        }
        let out = child.wait_with_output().await?;
        Ok(Output {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn pod_json(name: &str, labels: Value) -> Result<Pod> {
    Ok(serde_json::from_value(json!({"metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "python:latest"}], "terminationGracePeriodSeconds": 1}}))?)
}

/// The Service `webhooks/gate` (port 443 → 9443) with kube-sim told where it is served.
async fn gate_service(sim: &SimHandle, server: &WebhookServer) -> Result<()> {
    let client = sim.client().await;
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    nss.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "webhooks"}}))?).await?;
    let svcs: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client, "webhooks");
    svcs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "gate"},
            "spec": {"selector": {"app": "gate"}, "ports": [{"name": "https", "port": 443, "targetPort": 9443}]}}))?,
    )
    .await?;
    sim.set_service_address("webhooks/gate", Some(443), server.addr);
    Ok(())
}

fn service_webhook(name: &str, server: &WebhookServer, rules: Value) -> Value {
    json!({"name": name, "sideEffects": "None", "admissionReviewVersions": ["v1"], "rules": rules,
           "clientConfig": {"service": {"namespace": "webhooks", "name": "gate", "path": "/pods"}, "caBundle": server.ca_bundle()}})
}

fn requests(server: &WebhookServer) -> Vec<Value> {
    server.reviews().into_iter().map(|r| r["request"].clone()).collect()
}

// ---------------------------------------------------------------------------------------------
// Tests.

/// Configurations are an ordinary built-in kind: discovery lists them (beside the admission policies), `kubectl apply` / `get`
/// work, the v1 scheme defaults are filled in, and invalid ones get `422` with the real causes.
#[tokio::test]
async fn configurations_are_served_defaulted_and_validated() -> Result<()> {
    let sim = api_sim().await?;
    let kubectl = Kubectl::new(&sim, "admission-config")?;
    let out = kubectl.run(&["api-resources", "--api-group=admissionregistration.k8s.io", "-o", "name"]).await?;
    assert!(out.ok, "{}", out.stderr);
    let mut served: Vec<&str> = out.stdout.lines().collect();
    served.sort_unstable();
    assert_eq!(
        served,
        [
            "validatingadmissionpolicies.admissionregistration.k8s.io",
            "validatingadmissionpolicybindings.admissionregistration.k8s.io",
            "validatingwebhookconfigurations.admissionregistration.k8s.io",
        ]
    );
    let manifest = kubectl.path("vwc.yaml");
    write(
        &manifest,
        "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: pod-gate
webhooks:
- name: pods.gate.kourse.dev
  sideEffects: None
  admissionReviewVersions: [v1]
  clientConfig:
    service: {namespace: webhooks, name: gate, path: /pods}
  rules:
  - operations: [DELETE]
    apiGroups: ['']
    apiVersions: [v1]
    resources: [pods]
",
    )?;
    let out = kubectl.run(&["apply", "-f", manifest.to_str().unwrap()]).await?;
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "validatingwebhookconfiguration.admissionregistration.k8s.io/pod-gate created");
    let out = kubectl.run(&["get", "validatingwebhookconfigurations", "pod-gate", "-o", "json"]).await?;
    let got: Value = serde_json::from_str(&out.stdout)?;
    let w = &got["webhooks"][0];
    assert_eq!(w["failurePolicy"], "Fail");
    assert_eq!(w["matchPolicy"], "Equivalent");
    assert_eq!(w["timeoutSeconds"], 10);
    assert_eq!(w["namespaceSelector"], json!({}));
    assert_eq!(w["objectSelector"], json!({}));
    assert_eq!(w["rules"][0]["scope"], "*");
    assert_eq!(w["clientConfig"]["service"]["port"], 443);

    let bad = kubectl.path("bad.yaml");
    write(
        &bad,
        "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: bad
webhooks:
- name: gate
  sideEffects: Some
  timeoutSeconds: 31
  admissionReviewVersions: [v1]
  clientConfig:
    url: http://127.0.0.1:1/validate
",
    )?;
    let out = kubectl.run(&["apply", "-f", bad.to_str().unwrap()]).await?;
    assert!(!out.ok);
    for cause in [
        "webhooks[0].name: Invalid value: \"gate\": should be a domain with at least three segments separated by dots",
        "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\"",
        "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
        "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme",
    ] {
        assert!(out.stderr.contains(cause), "missing {cause:?} in {}", out.stderr);
    }
    assert!(out.stderr.contains("The ValidatingWebhookConfiguration \"bad\" is invalid:"), "{}", out.stderr);
    sim.shutdown().await;
    Ok(())
}

/// `kubectl delete pod` of a gated pod is refused with the webhook's message and code, exactly as
/// kubectl prints a refusal from kube-apiserver; the webhook is reached through its Service, with
/// the certificate verified for `gate.webhooks.svc`, and sees the DELETE as kube-apiserver sends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_of_a_gated_pod_is_denied_with_the_webhooks_message() -> Result<()> {
    let sim = sim().await?;
    let server =
        WebhookServer::start(deny(403, "pod web-0 is gated: it will be deleted after its pre-delete hook")).await?;
    gate_service(&sim, &server).await?;
    let mut hook = service_webhook("pods.gate.kourse.dev", &server, rule(&["DELETE"], "", &["pods"]));
    hook["objectSelector"] = json!({"matchLabels": {"gated": "true"}});
    apply(&sim, &configuration("pod-gate", hook)).await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    pods.create(&PostParams::default(), &pod_json("web-0", json!({"gated": "true"}))?).await?;
    pods.create(&PostParams::default(), &pod_json("other", json!({}))?).await?;
    wait_pod(&pods, "web-0", "Running", |p| phase(p) == Some("Running")).await?;

    let kubectl = Kubectl::new(&sim, "admission-delete")?;
    let out = kubectl.run(&["delete", "pod", "web-0", "--grace-period=5"]).await?;
    assert!(!out.ok);
    assert_eq!(
        out.stderr.trim(),
        "Error from server: admission webhook \"pods.gate.kourse.dev\" denied the request: pod web-0 is gated: it will be deleted after its pre-delete hook"
    );
    let live = pods.get("web-0").await?;
    assert!(live.metadata.deletion_timestamp.is_none(), "the refused delete changed nothing");
    // The status code is the webhook's.
    let err = pods.delete("web-0", &DeleteParams::default()).await.unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 403);
            assert!(
                s.message.starts_with("admission webhook \"pods.gate.kourse.dev\" denied the request: "),
                "{}",
                s.message
            );
        }
        other => bail!("unexpected error {other}"),
    }

    let reqs = requests(&server);
    let r = &reqs[0];
    assert_eq!(r["operation"], "DELETE");
    assert_eq!(r["kind"], json!({"group": "", "version": "v1", "kind": "Pod"}));
    assert_eq!(r["resource"], json!({"group": "", "version": "v1", "resource": "pods"}));
    assert_eq!(r["requestKind"], r["kind"]);
    assert_eq!(r["requestResource"], r["resource"]);
    assert!(r.get("subResource").is_none());
    assert_eq!((r["name"].as_str(), r["namespace"].as_str()), (Some("web-0"), Some("default")));
    assert_eq!(r["object"], Value::Null, "a DELETE has no object");
    assert_eq!(r["oldObject"]["metadata"]["name"], "web-0");
    assert_eq!(r["oldObject"]["metadata"]["uid"], json!(live.metadata.uid));
    assert_eq!(r["oldObject"]["status"]["phase"], "Running");
    // kubectl sends propagationPolicy Background in its DeleteOptions body.
    assert_eq!(
        r["options"],
        json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", "gracePeriodSeconds": 5, "propagationPolicy": "Background"})
    );
    assert_eq!(r["dryRun"], false);
    assert_eq!(r["userInfo"]["username"], "kube-sim-admin");
    assert_eq!(r["userInfo"]["groups"], json!(["system:masters", "system:authenticated"]));
    assert!(r["uid"].as_str().is_some_and(|u| !u.is_empty()));
    assert_eq!(server.reviews()[0]["query"], "timeout=10s", "kube-apiserver passes the timeout");

    // Pods the objectSelector does not select are deleted without a call.
    server.clear();
    let out = kubectl.run(&["delete", "pod", "other", "--wait=false"]).await?;
    assert!(out.ok, "{}", out.stderr);
    assert!(server.reviews().is_empty());

    // Once the webhook allows, the delete proceeds (and the kubelet's final delete is admitted too).
    server.set(allow());
    let out = kubectl.run(&["delete", "pod", "web-0"]).await?;
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "pod \"web-0\" deleted");
    wait_gone(&pods, "web-0").await?;
    let final_delete =
        requests(&server).into_iter().find(|r| r["oldObject"]["metadata"]["deletionTimestamp"].is_string());
    assert!(final_delete.is_some_and(|r| r["options"]["gracePeriodSeconds"] == 0), "{:#?}", requests(&server));
    server.stop();
    sim.shutdown().await;
    Ok(())
}

/// `kubectl drain` against a webhook that answers evictions with 429: kubectl retries (as it does
/// for a PodDisruptionBudget's 429) until the webhook allows, then the drain completes. The webhook
/// sees each eviction as `CREATE pods/eviction` with the Eviction as object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drain_waits_while_a_webhook_refuses_evictions_with_429() -> Result<()> {
    let sim = sim().await?;
    let server = WebhookServer::start(deny(429, "game server game-0 has 3 players")).await?;
    gate_service(&sim, &server).await?;
    let hook = service_webhook("evictions.gate.kourse.dev", &server, rule(&["CREATE"], "", &["pods/eviction"]));
    apply(&sim, &configuration("eviction-gate", hook)).await?;
    let client = sim.client().await;
    let owner = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "owner"}}))?)
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut pod = serde_json::to_value(pod_json("game-0", json!({"app": "game"}))?)?;
    pod["spec"]["nodeName"] = json!("kube-sim-node-1");
    pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
        "uid": owner.metadata.uid, "controller": true}]);
    pods.create(&PostParams::default(), &serde_json::from_value(pod)?).await?;
    wait_pod(&pods, "game-0", "Ready", is_ready).await?;

    let kubectl = Kubectl::new(&sim, "admission-drain")?;
    let drain = {
        let path = kubectl.dir.clone();
        tokio::spawn(async move {
            Kubectl { dir: path }.run(&["drain", "kube-sim-node-1", "--ignore-daemonsets", "--timeout=120s"]).await
        })
    };
    eventually("the webhook to refuse an eviction twice (kubectl retried)", || async {
        Ok((requests(&server).iter().filter(|r| r["subResource"] == "eviction").count() >= 2).then_some(()))
    })
    .await?;
    assert!(pods.get("game-0").await?.metadata.deletion_timestamp.is_none(), "the refused eviction changed nothing");
    server.set(allow());
    let out = drain.await??;
    assert!(out.ok, "kubectl drain failed:\n{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("node/kube-sim-node-1 drained"), "{}", out.stdout);
    assert!(
        out.stderr.contains(
            "error when evicting pods/\"game-0\" -n \"default\" (will retry after 5s): admission webhook \"evictions.gate.kourse.dev\" denied the request: game server game-0 has 3 players"
        ),
        "kubectl retried the 429:\n{}",
        out.stderr
    );
    wait_gone(&pods, "game-0").await?;

    let r = requests(&server).into_iter().find(|r| r["subResource"] == "eviction").context("an eviction review")?;
    assert_eq!(r["operation"], "CREATE");
    assert_eq!(r["kind"], json!({"group": "policy", "version": "v1", "kind": "Eviction"}));
    assert_eq!(r["resource"], json!({"group": "", "version": "v1", "resource": "pods"}));
    assert_eq!(r["requestSubResource"], "eviction");
    assert_eq!((r["name"].as_str(), r["namespace"].as_str()), (Some("game-0"), Some("default")));
    assert_eq!(r["object"]["kind"], "Eviction");
    assert_eq!(r["object"]["metadata"]["name"], "game-0");
    assert_eq!(r["oldObject"], Value::Null);
    assert_eq!(r["options"]["kind"], "CreateOptions");
    // The eviction's own pod delete is not admitted again (no DELETE reached this webhook, which
    // only asked for evictions anyway), and the pod went through graceful deletion.
    server.stop();
    sim.shutdown().await;
    Ok(())
}

/// `failurePolicy`: with the webhook server down, `Fail` (the default) refuses the request with
/// kube-apiserver's `500 InternalError` naming the call, `Ignore` lets it through.
#[tokio::test]
async fn failure_policy_decides_when_the_webhook_cannot_be_reached() -> Result<()> {
    let sim = api_sim().await?;
    let server = WebhookServer::start(allow()).await?;
    let url = server.url("/validate");
    let addr = server.addr;
    let mut hook = url_webhook("cm.fail.kourse.dev", &server, rule(&["CREATE"], "", &["configmaps"]));
    apply(&sim, &configuration("fail", hook.clone())).await?;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await, "default");
    let cm = |name: &str| serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": name}})).unwrap();
    cms.create(&PostParams::default(), &cm("while-up")).await?;
    server.stop();
    // Wait until the port no longer accepts connections.
    eventually("the webhook server to stop", || async {
        Ok(tokio::net::TcpStream::connect(addr).await.is_err().then_some(()))
    })
    .await?;

    let err = cms.create(&PostParams::default(), &cm("refused")).await.unwrap_err();
    let kube::Error::Api(s) = err else { bail!("unexpected error") };
    assert_eq!((s.code, s.reason.as_str()), (500, "InternalError"));
    assert_eq!(
        s.message,
        format!(
            "Internal error occurred: failed calling webhook \"cm.fail.kourse.dev\": failed to call webhook: Post \"{url}?timeout=10s\": dial tcp {addr}: connect: connection refused"
        )
    );
    assert!(cms.get_opt("refused").await?.is_none());

    hook["failurePolicy"] = json!("Ignore");
    apply(&sim, &configuration("fail", hook)).await?;
    cms.create(&PostParams::default(), &cm("ignored")).await?;
    sim.shutdown().await;
    Ok(())
}

/// A webhook that requires a client certificate (as one that authenticates the API server does)
/// is called with the certificate the admission kubeconfig names for its host
/// (`--admission-control-config-file`, `SimHandle::set_admission_client_auth`); without one the
/// handshake fails and `failurePolicy` decides.
#[tokio::test]
async fn the_client_certificate_of_the_webhook_host_is_presented() -> Result<()> {
    let sim = api_sim().await?;
    // The client CA and the certificate kube-sim presents.
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "api server client CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap()).unwrap();
    let mut client_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    client_params.distinguished_name.push(rcgen::DnType::CommonName, "kube-apiserver-webhook-client");
    client_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let client_key = rcgen::KeyPair::generate().unwrap();
    let client_cert = client_params.signed_by(&client_key, &ca).unwrap();
    let server = WebhookServer::start_tls(deny(403, "seen"), certs(SERVED_NAMES), Some(ca.der().to_vec())).await?;
    apply(
        &sim,
        &configuration("mtls", url_webhook("cm.mtls.kourse.dev", &server, rule(&["CREATE"], "", &["configmaps"]))),
    )
    .await?;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await, "default");
    let cm = |name: &str| serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": name}})).unwrap();

    // No certificate for this host: the handshake fails, failurePolicy Fail refuses.
    let err = cms.create(&PostParams::default(), &cm("anonymous")).await.unwrap_err();
    let kube::Error::Api(s) = err else { bail!("unexpected error") };
    assert!(s.message.contains("failed calling webhook \"cm.mtls.kourse.dev\""), "{}", s.message);
    assert!(server.reviews().is_empty(), "never reached the handler");

    // Another host's certificate is not presented; this host's is (the URL's HOST:PORT), and so is `*`.
    let (cert_pem, key_pem) = (client_cert.pem(), client_key.serialize_pem());
    sim.set_admission_client_auth(kube_sim::ClientAuth::single(
        "gate.webhooks.svc",
        cert_pem.as_bytes(),
        key_pem.as_bytes(),
    ));
    assert!(
        cms.create(&PostParams::default(), &cm("other-host"))
            .await
            .unwrap_err()
            .to_string()
            .contains("failed calling webhook")
    );
    for name in [server.addr.to_string(), "*".to_string()] {
        sim.set_admission_client_auth(kube_sim::ClientAuth::single(&name, cert_pem.as_bytes(), key_pem.as_bytes()));
        let err = cms.create(&PostParams::default(), &cm("verified")).await.unwrap_err();
        let kube::Error::Api(s) = err else { bail!("unexpected error") };
        assert_eq!(s.message, "admission webhook \"cm.mtls.kourse.dev\" denied the request: seen", "user {name}");
    }
    assert_eq!(server.reviews().len(), 2, "both calls reached the handler");
    sim.shutdown().await;
    Ok(())
}

/// Answers kube-apiserver does not accept fail the call (and `failurePolicy` decides): an HTTP
/// error, a body that is not an AdmissionReview, a response for another request (`uid`).
#[tokio::test]
async fn invalid_webhook_answers_fail_the_call() -> Result<()> {
    let sim = api_sim().await?;
    let server = WebhookServer::start(handler(|_| async { Reply::Raw(500, "boom".into()) })).await?;
    apply(
        &sim,
        &configuration(
            "bad-answers",
            url_webhook("cm.bad.kourse.dev", &server, rule(&["CREATE"], "", &["configmaps"])),
        ),
    )
    .await?;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await, "default");
    let cm = |name: &str| serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": name}})).unwrap();
    let message = |e: kube::Error| match e {
        kube::Error::Api(s) => (s.code, s.message),
        other => (0, other.to_string()),
    };
    let prefix = "Internal error occurred: failed calling webhook \"cm.bad.kourse.dev\": ";
    let (code, m) = message(cms.create(&PostParams::default(), &cm("a")).await.unwrap_err());
    assert_eq!(code, 500);
    assert_eq!(
        m,
        format!(
            "{prefix}failed to call webhook: an error on the server (\"boom\") has prevented the request from succeeding"
        )
    );
    server.set(handler(|_| async { Reply::Raw(200, "not json".into()) }));
    let (_, m) = message(cms.create(&PostParams::default(), &cm("a")).await.unwrap_err());
    assert!(
        m.starts_with(&format!("{prefix}failed to call webhook: couldn't get version/kind; json parse error: ")),
        "{m}"
    );
    server.set(handler(|_| async {
        Reply::Raw(200, json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "other", "allowed": true}}).to_string())
    }));
    let (_, m) = message(cms.create(&PostParams::default(), &cm("a")).await.unwrap_err());
    assert!(m.starts_with(&format!("{prefix}received invalid webhook response: expected response.uid=")), "{m}");
    assert!(m.ends_with(", got \"other\""), "{m}");
    assert!(cms.get_opt("a").await?.is_none());
    server.stop();
    sim.shutdown().await;
    Ok(())
}

/// `timeoutSeconds`: a webhook slower than its timeout is a failed call — refused under `Fail`
/// (`context deadline exceeded`), let through under `Ignore`; the URL carries `?timeout=1s`.
#[tokio::test]
async fn a_webhook_slower_than_its_timeout_is_a_failed_call() -> Result<()> {
    let sim = api_sim().await?;
    let server = WebhookServer::start(handler(|_| async {
        tokio::time::sleep(std::time::Duration::from_secs(4)).await;
        Reply::Response(json!({"allowed": true}))
    }))
    .await?;
    let mut hook = url_webhook("cm.slow.kourse.dev", &server, rule(&["CREATE"], "", &["configmaps"]));
    hook["timeoutSeconds"] = json!(1);
    apply(&sim, &configuration("slow", hook.clone())).await?;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await, "default");
    let cm = |name: &str| serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": name}})).unwrap();
    let kube::Error::Api(s) = cms.create(&PostParams::default(), &cm("late")).await.unwrap_err() else {
        bail!("unexpected error")
    };
    assert_eq!(s.code, 500);
    assert_eq!(
        s.message,
        format!(
            "Internal error occurred: failed calling webhook \"cm.slow.kourse.dev\": failed to call webhook: Post \"{}?timeout=1s\": context deadline exceeded",
            server.url("/validate")
        )
    );
    assert_eq!(server.reviews()[0]["query"], "timeout=1s");
    hook["failurePolicy"] = json!("Ignore");
    apply(&sim, &configuration("slow", hook)).await?;
    cms.create(&PostParams::default(), &cm("late")).await?;
    server.stop();
    sim.shutdown().await;
    Ok(())
}

/// `namespaceSelector` is evaluated on the request's namespace (a Namespace's own labels for
/// namespaces), `objectSelector` on the object and the old object — a DELETE matches on the object
/// being deleted, an UPDATE when either matches. An Eviction carries no pod labels, so a pod
/// `objectSelector` never selects evictions (gate evictions with a webhook of their own).
#[tokio::test]
async fn namespace_and_object_selectors_choose_the_requests_a_webhook_sees() -> Result<()> {
    let sim = api_sim().await?;
    let server = WebhookServer::start(deny(403, "gated")).await?;
    let client = sim.client().await;
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for (ns, labels) in [("games", json!({"gate": "on"})), ("tools", json!({}))] {
        nss.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns, "labels": labels}}))?,
        )
        .await?;
    }
    let mut by_ns = url_webhook("ns.sel.kourse.dev", &server, rule(&["CREATE"], "", &["configmaps"]));
    by_ns["namespaceSelector"] = json!({"matchLabels": {"gate": "on"}});
    apply(&sim, &configuration("by-namespace", by_ns)).await?;
    let cm = |name: &str, labels: Value| {
        serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
    };
    let games: Api<ConfigMap> = Api::namespaced(client.clone(), "games");
    let tools: Api<ConfigMap> = Api::namespaced(client.clone(), "tools");
    assert!(games.create(&PostParams::default(), &cm("a", json!({}))).await.is_err());
    tools.create(&PostParams::default(), &cm("a", json!({}))).await?;
    // The kubernetes.io/metadata.name label every namespace gets works as a selector too.
    let mut by_name = url_webhook("ns.sel.kourse.dev", &server, rule(&["CREATE"], "", &["configmaps"]));
    by_name["namespaceSelector"] = json!({"matchLabels": {"kubernetes.io/metadata.name": "tools"}});
    apply(&sim, &configuration("by-namespace", by_name)).await?;
    assert!(tools.create(&PostParams::default(), &cm("b", json!({}))).await.is_err());
    games.create(&PostParams::default(), &cm("b", json!({}))).await?;
    // Namespaces themselves are matched with their own labels.
    let mut on_ns = url_webhook("ns.sel.kourse.dev", &server, rule(&["CREATE"], "", &["namespaces"]));
    on_ns["namespaceSelector"] = json!({"matchLabels": {"team": "red"}});
    apply(&sim, &configuration("by-namespace", on_ns)).await?;
    let ns = |name: &str, labels: Value| {
        serde_json::from_value::<k8s_openapi::api::core::v1::Namespace>(
            json!({"metadata": {"name": name, "labels": labels}}),
        )
        .unwrap()
    };
    assert!(nss.create(&PostParams::default(), &ns("red", json!({"team": "red"}))).await.is_err());
    nss.create(&PostParams::default(), &ns("blue", json!({"team": "blue"}))).await?;
    let kubectl = Kubectl::new(&sim, "admission-selectors")?;
    let out = kubectl.run(&["delete", "validatingwebhookconfiguration", "by-namespace"]).await?;
    assert!(out.ok, "{}", out.stderr);

    // objectSelector: UPDATE and DELETE.
    let mut by_obj = url_webhook("obj.sel.kourse.dev", &server, rule(&["UPDATE", "DELETE"], "", &["configmaps"]));
    by_obj["objectSelector"] = json!({"matchLabels": {"locked": "true"}});
    apply(&sim, &configuration("by-object", by_obj)).await?;
    tools.create(&PostParams::default(), &cm("locked", json!({"locked": "true"}))).await?;
    tools.create(&PostParams::default(), &cm("free", json!({}))).await?;
    server.clear();
    let label = |v: Value| Patch::Merge(json!({"metadata": {"labels": v}}));
    // Removing the label is still an update of a selected object (the old object matches)...
    assert!(tools.patch("locked", &PatchParams::default(), &label(json!({"locked": null}))).await.is_err());
    // ...and adding it to a free object too (the new object matches).
    assert!(tools.patch("free", &PatchParams::default(), &label(json!({"locked": "true"}))).await.is_err());
    tools.patch("free", &PatchParams::default(), &label(json!({"other": "x"}))).await?;
    assert!(tools.delete("locked", &DeleteParams::default()).await.is_err());
    tools.delete("free", &DeleteParams::default()).await?;
    assert_eq!(requests(&server).len(), 3, "only the selected requests were sent: {:#?}", requests(&server));
    server.stop();
    sim.shutdown().await;
    Ok(())
}

/// An eviction's object is the Eviction: a webhook for `pods/eviction` with a pod-label
/// `objectSelector` is never called (as on kube-apiserver), one without is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_are_not_selected_by_pod_labels() -> Result<()> {
    let sim = sim().await?;
    let server = WebhookServer::start(deny(403, "busy")).await?;
    let mut hook = url_webhook("evict.sel.kourse.dev", &server, rule(&["CREATE"], "", &["pods/eviction"]));
    hook["objectSelector"] = json!({"matchLabels": {"gated": "true"}});
    apply(&sim, &configuration("evictions", hook.clone())).await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    pods.create(&PostParams::default(), &pod_json("a", json!({"gated": "true"}))?).await?;
    pods.create(&PostParams::default(), &pod_json("b", json!({"gated": "true"}))?).await?;
    wait_pod(&pods, "a", "Running", |p| phase(p) == Some("Running")).await?;
    wait_pod(&pods, "b", "Running", |p| phase(p) == Some("Running")).await?;
    let evict = kube::api::EvictParams::default();
    pods.evict("a", &evict).await?;
    assert!(server.reviews().is_empty(), "the Eviction has no pod labels");
    hook.as_object_mut().unwrap().remove("objectSelector");
    apply(&sim, &configuration("evictions", hook)).await?;
    let kube::Error::Api(s) = pods.evict("b", &evict).await.unwrap_err() else { bail!("unexpected error") };
    // (403 here: kube-rs itself retries 429s.)
    assert_eq!(
        (s.code, s.message.as_str()),
        (403, "admission webhook \"evict.sel.kourse.dev\" denied the request: busy")
    );
    server.stop();
    sim.shutdown().await;
    Ok(())
}

/// Dry-run requests reach webhooks (`sideEffects: None`) with `dryRun: true` and `dryRun: [All]`
/// in their options; a refusal refuses the dry run, an allowed dry run changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_requests_are_admitted_as_dry_runs() -> Result<()> {
    let sim = sim().await?;
    let server = WebhookServer::start(handler(|_| async {
        Reply::Response(json!({"allowed": false, "status": {"code": 403, "message": "not now"}, "warnings": ["dry runs are watched"]}))
    }))
    .await?;
    let mut hook = url_webhook("dry.kourse.dev", &server, rule(&["DELETE"], "", &["pods"]));
    hook["sideEffects"] = json!("NoneOnDryRun");
    apply(&sim, &configuration("dry", hook)).await?;
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    pods.create(&PostParams::default(), &pod_json("web", json!({}))?).await?;
    let kubectl = Kubectl::new(&sim, "admission-dry-run")?;
    let out = kubectl.run(&["delete", "pod", "web", "--dry-run=server"]).await?;
    assert!(!out.ok);
    // (Known difference: kube-apiserver would also send the webhook's warning with the refusal.)
    assert!(!out.stderr.contains("Warning:"), "{}", out.stderr);
    assert_eq!(
        out.stderr.trim(),
        "Error from server: admission webhook \"dry.kourse.dev\" denied the request: not now"
    );
    let r = &requests(&server)[0];
    assert_eq!(r["dryRun"], true);
    assert_eq!(r["options"]["dryRun"], json!(["All"]));
    server.set(allow());
    let out = kubectl.run(&["delete", "pod", "web", "--dry-run=server"]).await?;
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "pod \"web\" deleted (server dry run)");
    assert!(pods.get("web").await?.metadata.deletion_timestamp.is_none(), "a dry run changes nothing");
    server.stop();
    sim.shutdown().await;
    Ok(())
}

/// CREATE and UPDATE reviews carry the object as it will be stored — after defaults, with the
/// name generated from `generateName` and the uid it is then stored with — and the stored object
/// for an UPDATE; `options` are `CreateOptions` / `UpdateOptions` with the field manager. Status
/// updates reach rules for `pods/status` with `subResource: status`. Warnings of an allowing
/// webhook reach the client (`Warning:` lines of kubectl).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_and_update_reviews_carry_the_objects_as_stored() -> Result<()> {
    let sim = sim().await?;
    let server = WebhookServer::start(handler(|_| async {
        Reply::Response(json!({"allowed": true, "warnings": ["pods of this namespace are watched"]}))
    }))
    .await?;
    apply(
        &sim,
        &configuration(
            "all-pods",
            url_webhook("pods.all.kourse.dev", &server, rule(&["*"], "", &["pods", "pods/status", "pods/binding"])),
        ),
    )
    .await?;
    let kubectl = Kubectl::new(&sim, "admission-create")?;
    let manifest = kubectl.path("pod.yaml");
    write(
        &manifest,
        "apiVersion: v1
kind: Pod
metadata:
  generateName: game-
  labels: {app: game}
spec:
  containers:
  - name: c
    image: python:latest
",
    )?;
    let out = kubectl.run(&["create", "-f", manifest.to_str().unwrap()]).await?;
    assert!(out.ok, "{}", out.stderr);
    assert!(out.stderr.contains("Warning: pods of this namespace are watched"), "{}", out.stderr);
    let name = out
        .stdout
        .trim()
        .strip_prefix("pod/")
        .and_then(|s| s.strip_suffix(" created"))
        .context("created name")?
        .to_string();
    let pods: Api<Pod> = Api::namespaced(sim.client().await, "default");
    let stored = pods.get(&name).await?;
    let create = requests(&server).into_iter().find(|r| r["operation"] == "CREATE").context("a CREATE review")?;
    assert_eq!(create["name"], json!(name), "the generated name");
    assert_eq!(create["object"]["metadata"]["name"], json!(name));
    assert_eq!(create["object"]["metadata"]["uid"], json!(stored.metadata.uid), "the uid it was stored with");
    assert_eq!(create["object"]["spec"]["restartPolicy"], "Always", "defaults are applied");
    assert_eq!(create["object"]["spec"]["serviceAccountName"], "default", "admission plugins ran");
    assert_eq!(create["oldObject"], Value::Null);
    assert_eq!(
        create["options"],
        json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-create"})
    );

    // The kubelet's status patches are UPDATEs of pods/status, its scheduler's binding a CREATE.
    wait_pod(&pods, &name, "Ready", is_ready).await?;
    let binding = requests(&server).into_iter().find(|r| r["subResource"] == "binding").context("a binding review")?;
    assert_eq!(binding["operation"], "CREATE");
    assert_eq!(binding["kind"], json!({"group": "", "version": "v1", "kind": "Binding"}));
    assert_eq!(binding["name"], json!(name));
    assert!(binding["object"]["target"]["name"].as_str().is_some_and(|n| n.starts_with("kube-sim-node-")));
    let status = requests(&server).into_iter().find(|r| r["subResource"] == "status").context("a status review")?;
    assert_eq!(status["operation"], "UPDATE");
    assert_eq!(status["kind"]["kind"], "Pod");
    assert_eq!(status["oldObject"]["metadata"]["name"], json!(name));
    assert_eq!(status["options"]["kind"], "UpdateOptions");

    server.clear();
    let out = kubectl.run(&["label", "pod", &name, "tier=gold"]).await?;
    assert!(out.ok, "{}", out.stderr);
    let update = requests(&server).into_iter().find(|r| r["operation"] == "UPDATE").context("an UPDATE review")?;
    assert_eq!(update["object"]["metadata"]["labels"]["tier"], "gold");
    assert!(update["oldObject"]["metadata"]["labels"].get("tier").is_none());
    assert_eq!(
        update["options"],
        json!({"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-label"})
    );
    server.stop();
    sim.shutdown().await;
    Ok(())
}

/// kube-apiserver admits an update again when a concurrent write changed the object between the
/// webhook call and the commit (its storage retry re-runs validation): the webhook sees the
/// update twice, the second time over the concurrent write, and both changes are kept.
#[tokio::test]
async fn an_update_raced_during_admission_is_admitted_again() -> Result<()> {
    let sim = api_sim().await?;
    let client = sim.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let server = {
        let (cms, first) = (cms.clone(), first.clone());
        WebhookServer::start(handler(move |review: Value| {
            let (cms, first) = (cms.clone(), first.clone());
            async move {
                let r = &review["request"];
                if r["object"]["data"]["mine"] == "1" && first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    // Another client writes while this webhook deliberates.
                    let p = Patch::Merge(json!({"data": {"other": "2"}}));
                    cms.patch("raced", &PatchParams::default(), &p).await.unwrap();
                }
                Reply::Response(json!({"allowed": true}))
            }
        }))
        .await?
    };
    apply(
        &sim,
        &configuration("updates", url_webhook("cm.race.kourse.dev", &server, rule(&["UPDATE"], "", &["configmaps"]))),
    )
    .await?;
    cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "raced"}}))?).await?;
    cms.patch("raced", &PatchParams::default(), &Patch::Merge(json!({"data": {"mine": "1"}}))).await?;
    let got = cms.get("raced").await?;
    assert_eq!(
        got.data.unwrap_or_default().into_iter().collect::<Vec<_>>(),
        vec![("mine".into(), "1".into()), ("other".into(), "2".into())]
    );
    let mine: Vec<Value> = requests(&server).into_iter().filter(|r| r["object"]["data"]["mine"] == "1").collect();
    assert_eq!(mine.len(), 2, "admitted again after the concurrent write: {mine:#?}");
    assert_eq!(mine[1]["oldObject"]["data"]["other"], "2");
    assert_eq!(mine[1]["object"]["data"], json!({"mine": "1", "other": "2"}));
    server.stop();
    sim.shutdown().await;
    Ok(())
}

/// Webhooks are never called for the webhook configurations themselves: a webhook refusing
/// everything (`*/*`) cannot lock its own configuration in.
#[tokio::test]
async fn webhook_configurations_are_exempt() -> Result<()> {
    let sim = api_sim().await?;
    let server = WebhookServer::start(deny(403, "everything is refused")).await?;
    apply(
        &sim,
        &configuration(
            "deny-all",
            url_webhook(
                "all.deny.kourse.dev",
                &server,
                json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}]),
            ),
        ),
    )
    .await?;
    let kubectl = Kubectl::new(&sim, "admission-exempt")?;
    let out = kubectl.run(&["create", "configmap", "x"]).await?;
    assert_eq!(
        out.stderr.trim(),
        "error: failed to create configmap: admission webhook \"all.deny.kourse.dev\" denied the request: everything is refused"
    );
    let out = kubectl.run(&["delete", "validatingwebhookconfiguration", "deny-all"]).await?;
    assert!(out.ok, "{}", out.stderr);
    assert!(server.reviews().iter().all(|r| r["request"]["resource"]["group"] != "admissionregistration.k8s.io"));
    let out = kubectl.run(&["create", "configmap", "x"]).await?;
    assert!(out.ok, "{}", out.stderr);
    server.stop();
    sim.shutdown().await;
    Ok(())
}

/// The server certificate is verified against `caBundle` for the name kube-apiserver verifies:
/// another CA, or a certificate not valid for `NAME.NAMESPACE.svc`, fails the call. A Service
/// without an address mapping is reached through its Endpoints; without either, or without the
/// Service, the call fails with kube-apiserver's words.
#[tokio::test]
async fn certificates_and_service_resolution_are_checked() -> Result<()> {
    let sim = api_sim().await?;
    let server = WebhookServer::start(deny(403, "reached")).await?;
    gate_service(&sim, &server).await?;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await, "default");
    let cm = |name: &str| serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": name}})).unwrap();
    let message = |e: kube::Error| match e {
        kube::Error::Api(s) => s.message,
        other => other.to_string(),
    };
    let mut hook = service_webhook("cm.tls.kourse.dev", &server, rule(&["CREATE"], "", &["configmaps"]));
    apply(&sim, &configuration("tls", hook.clone())).await?;
    assert!(
        message(cms.create(&PostParams::default(), &cm("a")).await.unwrap_err())
            .ends_with("denied the request: reached")
    );

    // Another CA.
    let other = certs(SERVED_NAMES);
    hook["clientConfig"]["caBundle"] = json!(data_encoding::BASE64.encode(other.ca_pem.as_bytes()));
    apply(&sim, &configuration("tls", hook.clone())).await?;
    let m = message(cms.create(&PostParams::default(), &cm("a")).await.unwrap_err());
    assert!(
        m.starts_with("Internal error occurred: failed calling webhook \"cm.tls.kourse.dev\": failed to call webhook: Post \"https://gate.webhooks.svc:443/pods?timeout=10s\": tls: failed to verify certificate: "),
        "{m}"
    );
    // A certificate for other names (signed by the trusted CA).
    let wrong_name =
        WebhookServer::start_with(deny(403, "reached"), certs(&["127.0.0.1", "other.webhooks.svc"])).await?;
    sim.set_service_address("webhooks/gate", Some(443), wrong_name.addr);
    hook["clientConfig"]["caBundle"] = json!(wrong_name.ca_bundle());
    apply(&sim, &configuration("tls", hook.clone())).await?;
    let m = message(cms.create(&PostParams::default(), &cm("a")).await.unwrap_err());
    assert!(m.contains("tls: failed to verify certificate: "), "{m}");
    // ...which is fine for a URL naming an address the certificate covers.
    hook["clientConfig"] = json!({"url": wrong_name.url("/x"), "caBundle": wrong_name.ca_bundle()});
    apply(&sim, &configuration("tls", hook.clone())).await?;
    assert!(
        message(cms.create(&PostParams::default(), &cm("a")).await.unwrap_err())
            .ends_with("denied the request: reached")
    );
    wrong_name.stop();

    // Endpoints instead of an explicit address.
    let client = sim.client().await;
    let eps: Api<k8s_openapi::api::core::v1::Endpoints> = Api::namespaced(client.clone(), "webhooks");
    hook["clientConfig"] =
        json!({"service": {"namespace": "webhooks", "name": "gate", "path": "/pods"}, "caBundle": server.ca_bundle()});
    apply(&sim, &configuration("tls", hook.clone())).await?;
    sim.set_service_address("webhooks/gate", Some(443), "127.0.0.1:1".parse()?);
    // (An explicit address wins over Endpoints; remove it through the admin API.)
    let admin = reqwest::Client::new();
    let resp = admin.delete(format!("{}/kube-sim/service-addresses", sim.url())).send().await?;
    assert!(resp.status().is_success());
    // The Service selects no pod: the endpoint controllers give it no endpoints.
    let m = message(cms.create(&PostParams::default(), &cm("a")).await.unwrap_err());
    assert!(m.ends_with("failed to call webhook: Post \"https://gate.webhooks.svc:443/pods?timeout=10s\": no endpoints available for service \"gate\""), "{m}");
    // Without a selector, its Endpoints are written by hand (the controllers' empty ones replaced).
    let svcs: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), "webhooks");
    svcs.patch("gate", &PatchParams::default(), &Patch::Merge(json!({"spec": {"selector": null}}))).await?;
    let _ = eps.delete("gate", &Default::default()).await;
    eps.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "gate"}, "subsets": [{"addresses": [{"ip": "127.0.0.1"}],
            "ports": [{"name": "https", "port": server.addr.port()}]}]}))?,
    )
    .await?;
    kube_sim::testing::eventually("the hand-written Endpoints to be routed to", || async {
        Ok(message(cms.create(&PostParams::default(), &cm("a")).await.unwrap_err())
            .ends_with("denied the request: reached")
            .then_some(()))
    })
    .await?;
    // The admin API sets addresses too.
    let resp = admin
        .post(format!("{}/kube-sim/service-addresses", sim.url()))
        .json(&json!({"service": "webhooks/gate", "address": "127.0.0.1:1"}))
        .send()
        .await?;
    assert!(resp.status().is_success());
    let listed: Value = admin.get(format!("{}/kube-sim/service-addresses", sim.url())).send().await?.json().await?;
    assert_eq!(listed, json!({"items": [{"service": "webhooks/gate", "address": "127.0.0.1:1"}]}));
    let m = message(cms.create(&PostParams::default(), &cm("a")).await.unwrap_err());
    assert!(m.ends_with("dial tcp 127.0.0.1:1: connect: connection refused"), "{m}");

    // No such Service / port.
    hook["clientConfig"]["service"]["port"] = json!(8443);
    apply(&sim, &configuration("tls", hook.clone())).await?;
    let m = message(cms.create(&PostParams::default(), &cm("a")).await.unwrap_err());
    assert!(m.ends_with(": no service port 8443 found for service \"gate\""), "{m}");
    hook["clientConfig"]["service"] = json!({"namespace": "webhooks", "name": "missing"});
    apply(&sim, &configuration("tls", hook)).await?;
    let m = message(cms.create(&PostParams::default(), &cm("a")).await.unwrap_err());
    assert!(m.ends_with("failed to call webhook: Post \"https://missing.webhooks.svc:443?timeout=10s\": service \"missing\" not found"), "{m}");
    server.stop();
    sim.shutdown().await;
    Ok(())
}

/// `matchPolicy: Equivalent` (the default) calls a webhook whose rule names another served
/// version of the resource, with the object converted to that version (`kind`, `resource`) and
/// the request's own version in `requestKind` / `requestResource`; `Exact` does not call it.
#[tokio::test]
async fn equivalent_match_policy_converts_to_the_rules_version() -> Result<()> {
    let sim = api_sim().await?;
    let client = sim.client().await;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let schema = json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "arenas.games.kourse.dev"}, "spec": {"group": "games.kourse.dev",
            "names": {"plural": "arenas", "singular": "arena", "kind": "Arena", "listKind": "ArenaList"}, "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": schema},
                         {"name": "v1beta1", "served": true, "storage": false, "schema": schema}]}}))?,
    )
    .await?;
    let server = WebhookServer::start(deny(403, "no arenas today")).await?;
    let rules = json!([{"operations": ["CREATE"], "apiGroups": ["games.kourse.dev"], "apiVersions": ["v1"], "resources": ["arenas"]}]);
    let mut hook = url_webhook("arenas.kourse.dev", &server, rules);
    apply(&sim, &configuration("arenas", hook.clone())).await?;
    let beta = kube::api::ApiResource {
        group: "games.kourse.dev".into(),
        version: "v1beta1".into(),
        api_version: "games.kourse.dev/v1beta1".into(),
        kind: "Arena".into(),
        plural: "arenas".into(),
    };
    let arenas: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), "default", &beta);
    let arena: kube::api::DynamicObject = serde_json::from_value(
        json!({"apiVersion": "games.kourse.dev/v1beta1", "kind": "Arena", "metadata": {"name": "a"}, "spec": {"size": 3}}),
    )?;
    assert!(arenas.create(&PostParams::default(), &arena).await.is_err());
    let r = &requests(&server)[0];
    assert_eq!(r["kind"], json!({"group": "games.kourse.dev", "version": "v1", "kind": "Arena"}));
    assert_eq!(r["resource"], json!({"group": "games.kourse.dev", "version": "v1", "resource": "arenas"}));
    assert_eq!(r["requestKind"], json!({"group": "games.kourse.dev", "version": "v1beta1", "kind": "Arena"}));
    assert_eq!(r["requestResource"], json!({"group": "games.kourse.dev", "version": "v1beta1", "resource": "arenas"}));
    assert_eq!(r["object"]["apiVersion"], "games.kourse.dev/v1");
    assert_eq!(r["object"]["spec"]["size"], 3);
    hook["matchPolicy"] = json!("Exact");
    apply(&sim, &configuration("arenas", hook)).await?;
    arenas.create(&PostParams::default(), &arena).await?;
    assert_eq!(requests(&server).len(), 1, "Exact does not match another version");
    server.stop();
    sim.shutdown().await;
    Ok(())
}

/// The scale subresource is admitted with `autoscaling/v1` Scale objects (`deployments/scale`).
#[tokio::test]
async fn scale_updates_are_admitted_as_scale_objects() -> Result<()> {
    let sim = api_sim().await?;
    let server = WebhookServer::start(deny(403, "replicas are frozen")).await?;
    apply(
        &sim,
        &configuration(
            "scale",
            url_webhook("scale.kourse.dev", &server, rule(&["UPDATE"], "apps", &["deployments/scale"])),
        ),
    )
    .await?;
    let kubectl = Kubectl::new(&sim, "admission-scale")?;
    let out = kubectl.run(&["create", "deployment", "web", "--image=nginx", "--replicas=1"]).await?;
    assert!(out.ok, "{}", out.stderr);
    let out = kubectl.run(&["scale", "deployment", "web", "--replicas=3"]).await?;
    assert!(!out.ok);
    assert_eq!(
        out.stderr.trim(),
        "Error from server: admission webhook \"scale.kourse.dev\" denied the request: replicas are frozen"
    );
    let r = &requests(&server)[0];
    assert_eq!(r["kind"], json!({"group": "autoscaling", "version": "v1", "kind": "Scale"}));
    assert_eq!(r["resource"], json!({"group": "apps", "version": "v1", "resource": "deployments"}));
    assert_eq!(r["subResource"], "scale");
    assert_eq!(
        (r["object"]["spec"]["replicas"].as_i64(), r["oldObject"]["spec"]["replicas"].as_i64()),
        (Some(3), Some(1))
    );
    server.stop();
    sim.shutdown().await;
    Ok(())
}

/// A deletecollection admits each item's DELETE on its own; a refused item fails the request
/// and stays. `kubectl get validatingwebhookconfigurations` prints the server's columns.
#[tokio::test]
async fn deletecollection_admits_each_item() -> Result<()> {
    let sim = api_sim().await?;
    let server = WebhookServer::start(handler(|review: Value| async move {
        if review["request"]["oldObject"]["metadata"]["labels"]["keep"] == "true" {
            Reply::Response(json!({"allowed": false, "status": {"code": 403, "message": "kept"}}))
        } else {
            Reply::Response(json!({"allowed": true}))
        }
    }))
    .await?;
    apply(
        &sim,
        &configuration("keep", url_webhook("keep.kourse.dev", &server, rule(&["DELETE"], "", &["configmaps"]))),
    )
    .await?;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await, "default");
    for (name, keep) in [("a", "false"), ("b", "true"), ("c", "false")] {
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name, "labels": {"keep": keep}}}))?,
        )
        .await?;
    }
    let err = cms.delete_collection(&DeleteParams::default(), &Default::default()).await.unwrap_err();
    let kube::Error::Api(s) = err else { bail!("unexpected error") };
    assert_eq!((s.code, s.message.as_str()), (403, "admission webhook \"keep.kourse.dev\" denied the request: kept"));
    assert!(cms.get_opt("b").await?.is_some());
    let names: Vec<String> = requests(&server).iter().map(|r| r["name"].as_str().unwrap_or("").to_string()).collect();
    assert!(
        names.contains(&"b".to_string()) && names.iter().all(|n| ["a", "b", "c"].contains(&n.as_str())),
        "{names:?}"
    );

    let kubectl = Kubectl::new(&sim, "admission-table")?;
    let out = kubectl.run(&["get", "validatingwebhookconfigurations"]).await?;
    let lines: Vec<Vec<&str>> = out.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0], vec!["NAME", "WEBHOOKS", "AGE"], "{}", out.stdout);
    assert_eq!(&lines[1][..2], &["keep", "1"], "{}", out.stdout);
    server.stop();
    sim.shutdown().await;
    Ok(())
}

/// Known difference: `matchConditions` (CEL) are not evaluated — a webhook is called as if every
/// condition were true (kube-apiserver would skip it when one is false).
#[tokio::test]
async fn match_conditions_are_not_evaluated() -> Result<()> {
    let sim = api_sim().await?;
    let server = WebhookServer::start(deny(403, "called")).await?;
    let mut hook = url_webhook("cel.kourse.dev", &server, rule(&["CREATE"], "", &["configmaps"]));
    hook["matchConditions"] = json!([{"name": "never", "expression": "false"}]);
    apply(&sim, &configuration("cel", hook)).await?;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().await, "default");
    let refused =
        cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "x"}}))?).await;
    assert!(refused.is_err(), "kube-sim called the webhook (a real server would not have)");
    server.stop();
    sim.shutdown().await;
    Ok(())
}

/// The ReplicaSet controller's pod creations and deletions are admitted as its ServiceAccount's requests, as
/// kube-controller-manager's are: a refused creation is a `FailedCreate` Event on the ReplicaSet and is tried
/// again, and the pods it deletes are asked about too.
#[tokio::test]
async fn replicaset_controller_pod_writes_are_admitted_as_its_service_account() -> Result<()> {
    let sim = api_sim().await?;
    let server = WebhookServer::start(deny(403, "no pods here")).await?;
    apply(
        &sim,
        &configuration("rs-pods", url_webhook("rs.kourse.dev", &server, rule(&["CREATE", "DELETE"], "", &["pods"]))),
    )
    .await?;
    let client = sim.client().await;
    let replica_sets: Api<k8s_openapi::api::apps::v1::ReplicaSet> = Api::namespaced(client.clone(), "default");
    let rs = json!({"metadata": {"name": "web"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
    replica_sets.create(&PostParams::default(), &serde_json::from_value(rs)?).await?;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let refused = eventually("a FailedCreate Event on the ReplicaSet", || async {
        Ok(events.list(&Default::default()).await?.items.into_iter().find_map(|e| {
            (e.reason.as_deref() == Some("FailedCreate") && e.involved_object.name.as_deref() == Some("web"))
                .then(|| e.message.unwrap_or_default())
        }))
    })
    .await?;
    assert_eq!(refused, "Error creating: admission webhook \"rs.kourse.dev\" denied the request: no pods here");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    assert!(pods.list(&Default::default()).await?.items.is_empty(), "the refused pod was not created");
    let create = requests(&server).into_iter().find(|r| r["operation"] == "CREATE").context("a CREATE review")?;
    assert_eq!(create["userInfo"]["username"], "system:serviceaccount:kube-system:replicaset-controller");
    assert_eq!(create["object"]["metadata"]["ownerReferences"][0]["name"], "web");

    // Allowed now: the controller's next attempt creates the pod; scaled to zero, it deletes it through the webhook.
    server.set(allow());
    let pod = eventually("the ReplicaSet's pod", || async {
        Ok(pods.list(&Default::default()).await?.items.into_iter().next().and_then(|p| p.metadata.name))
    })
    .await?;
    replica_sets.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 0}}))).await?;
    eventually("the pod to be deleted", || async {
        Ok(pods.get_opt(&pod).await?.is_none_or(|p| p.metadata.deletion_timestamp.is_some()).then_some(()))
    })
    .await?;
    let delete = requests(&server)
        .into_iter()
        .find(|r| r["operation"] == "DELETE" && r["name"] == pod.as_str())
        .context("a DELETE review of the pod")?;
    assert_eq!(delete["userInfo"]["username"], "system:serviceaccount:kube-system:replicaset-controller");
    server.stop();
    sim.shutdown().await;
    Ok(())
}

/// Known difference: kube-sim's garbage collector deletes dependents inside the server, so a
/// webhook never sees those deletes (on a cluster the garbage collector's DELETE requests reach
/// it, as user `system:serviceaccount:kube-system:generic-garbage-collector`).
#[tokio::test]
async fn garbage_collector_deletes_are_not_admitted() -> Result<()> {
    let sim = api_sim().await?;
    let server = WebhookServer::start(deny(403, "no deletes")).await?;
    apply(
        &sim,
        &configuration("no-deletes", url_webhook("gc.kourse.dev", &server, rule(&["DELETE"], "", &["configmaps"]))),
    )
    .await?;
    let client = sim.client().await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), "default");
    let owner = secrets
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "owner"}}))?)
        .await?;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "dependent", "ownerReferences": [
            {"apiVersion": "v1", "kind": "Secret", "name": "owner", "uid": owner.metadata.uid}]}}))?,
    )
    .await?;
    assert!(cms.delete("dependent", &DeleteParams::default()).await.is_err(), "a client's delete is admitted");
    secrets.delete("owner", &DeleteParams::default()).await?;
    eventually("the dependent to be collected", || async {
        Ok(cms.get_opt("dependent").await?.is_none().then_some(()))
    })
    .await?;
    assert_eq!(requests(&server).len(), 1, "only the client's delete reached the webhook");
    server.stop();
    sim.shutdown().await;
    Ok(())
}
