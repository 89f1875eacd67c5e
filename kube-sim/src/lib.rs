//! kube-sim: a local, in-memory Kubernetes API server built for fidelity to kube-apiserver,
//! plus a kubelet simulator that makes pods live.
//!
//! It exists because these machines cannot run a real API server, and every end-to-end test and
//! the sandbox need one whose behaviour matches a real cluster for what kubectl, Helm and
//! kube-rs send. See `README.md` for the known differences from a real API server.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let sim = kube_sim::start(kube_sim::SimConfig::default()).await?;
//! let client = sim.client().await;
//! sim.write_kubeconfig(std::path::Path::new("/tmp/kubeconfig"))?;
//! // ... use `client`, or run kubectl with KUBECONFIG=/tmp/kubeconfig ...
//! sim.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Layering
//!
//! Top to bottom; a module uses only modules on lines below its own, never one on its own line or above
//! (`tests/e2e/tests/dependency_direction.rs` reads this list and checks it against the code; this file's own items
//! sit above it all):
//!
//! 1. `server`, `kubelet` — the HTTP API server (routes, handlers, watches) and the kubelet and scheduler
//!    simulator, which reaches the server only as a client;
//! 2. `controllers` — the control loops next to the API server (garbage collector, namespace lifecycle…), which
//!    also drive PodDisruptionBudget status and volume provisioning;
//! 3. `disruption`, `manifests`, `table`, `volumes`, `workloads` — built on the registry: PodDisruptionBudgets and
//!    eviction, `--apply`, Table output, the volume provisioner, the workload and endpoint controllers (whose own
//!    writes go through admission as a controller's requests do);
//! 4. `registry` — every verb's semantics; a write calls admission through `admission::Gate` right before it
//!    commits;
//! 5. `admission`, `auth`, `componentstatus`, `discovery`, `managed`, `openapi` — webhooks and
//!    ValidatingAdmissionPolicies (they read the store, never write), authentication and RBAC, component statuses,
//!    discovery documents, managed fields, the OpenAPI documents;
//! 6. `patch`, `resources`, `routing`, `selector` — patch types, the resource catalog, where a Service's traffic
//!    goes, label and field selectors;
//! 7. `faults`, `protobuf`, [`schema`], `store`, `validation` — fault injection, protobuf request bodies, structural
//!    schemas, the versioned object store, name and metadata validation;
//! 8. `audit`, `codec`, `json`, `jsonpath`, `logs`, `meta`, `status`, [`testing`], `user`, `version` — leaves: the
//!    audit log, decoding through k8s-openapi types, JSON helpers, JSONPath, pod logs, metadata accessors, API errors,
//!    test polling, the authenticated user, the reported Kubernetes release.
//!
//! Within a folder, a module's children may use their parent's items, and siblings never form a circle (the same
//! test).

#![warn(unreachable_pub)]

// The public API is this file's items and re-exports, `schema` (the CRD schema checks of common's example tests)
// and `testing`; every other module is internal to the crate.
mod admission;
mod audit;
mod auth;
mod codec;
mod componentstatus;
mod controllers;
mod discovery;
mod disruption;
mod faults;
mod json;
mod jsonpath;
mod kubelet;
mod logs;
mod managed;
mod manifests;
mod meta;
mod openapi;
mod patch;
mod protobuf;
mod registry;
mod resources;
mod routing;
pub mod schema;
mod selector;
mod server;
mod status;
mod store;
mod table;
pub mod testing;
mod user;
mod validation;
mod version;
mod volumes;
mod workloads;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

pub use admission::auth::load_admission_config;
pub use admission::{ClientAuth, ServiceAddress};
pub use audit::{AuditEvent, AuditLog};
pub use auth::TokenUser;
pub use faults::{FaultConfig, FaultCounts, FaultRule};
pub use kubelet::{ImageRule, KubeletConfig, parse_duration};
pub use manifests::ManifestError;
pub use version::{GIT_VERSION, KUBELET_VERSION};

/// Why kube-sim could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("invalid token file: {0}")]
    TokenFile(String),
    #[error("cannot build a client for kube-sim at {url}: {source}")]
    Client { url: String, source: Box<kube::Error> },
    #[error("bootstrapping {what} failed: {source}")]
    Bootstrap { what: String, source: Box<status::ApiError> },
}

/// Settings of one kube-sim instance.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Where to listen; port 0 picks a free port.
    pub addr: SocketAddr,
    /// The kubelet simulator's settings; `None` runs the API server alone.
    pub kubelet: Option<KubeletConfig>,
    /// Static bearer tokens (`token,user,uid,"group1,group2"` per line) for RBAC-checked users.
    pub token_file: Option<PathBuf>,
    /// Initial fault-injection rules (changeable at runtime through `/kube-sim/faults`).
    pub faults: FaultConfig,
    /// Events kept per resource for watches and paginated lists; older versions get `410 Gone`.
    pub watch_history: usize,
    /// Events buffered per watcher before a slow watcher is disconnected.
    pub watch_buffer: usize,
    /// Serve aggregated discovery (kubectl's first choice); off forces the legacy path.
    pub aggregated_discovery: bool,
    /// Interval between watch bookmarks.
    pub bookmark_interval: Duration,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Write requests kept in the audit log (oldest evicted first); 0 turns it off.
    pub audit_capacity: usize,
    /// Where Services named by admission webhooks (`clientConfig.service`) are reached.
    pub service_addresses: Vec<ServiceAddress>,
    /// The client certificates presented to admission webhooks, by webhook host
    /// (`--admission-control-config-file`, see `admission::auth`).
    pub admission_client_auth: ClientAuth,
    /// How long after a pod's change the Endpoints and EndpointSlices of its Services follow (a
    /// real cluster takes a moment to withdraw an endpoint; tests model it with this).
    pub endpoint_propagation_delay: Duration,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            kubelet: Some(KubeletConfig::default()),
            token_file: None,
            faults: FaultConfig::default(),
            watch_history: 20_000,
            watch_buffer: 100_000,
            aggregated_discovery: true,
            bookmark_interval: server::BOOKMARK_INTERVAL,
            max_body_bytes: 3 * 1024 * 1024,
            audit_capacity: 100_000,
            service_addresses: Vec::new(),
            admission_client_auth: ClientAuth::default(),
            endpoint_propagation_delay: Duration::ZERO,
        }
    }
}

/// A running kube-sim.
pub struct SimHandle {
    addr: SocketAddr,
    registry: Arc<registry::Registry>,
    faults: Arc<faults::Faults>,
    audit: Arc<audit::Audit>,
    auth: Arc<auth::Authenticator>,
    admission: Arc<admission::Admission>,
    shutdown: tokio::sync::watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    background: Vec<tokio::task::JoinHandle<()>>,
}

impl SimHandle {
    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The newest resourceVersion of the store (a write changes it, a no-op write does not).
    pub fn resource_version(&self) -> u64 {
        self.registry.store.current_rv()
    }

    /// Reads the manifests under `paths` (files and directories of YAML or JSON, `List`s flattened) and applies them
    /// with server-side apply and strict field validation, CustomResourceDefinitions and Namespaces first, as
    /// `kube-sim --apply` does. Returns `resource/name` of each object applied, in order.
    pub fn apply_manifests(&self, paths: &[PathBuf]) -> Result<Vec<String>, ManifestError> {
        manifests::apply(&self.registry, &manifests::load(paths)?)
    }

    /// Replaces the fault-injection rules.
    pub fn set_faults(&self, config: FaultConfig) {
        self.faults.set(config);
    }

    /// The current fault-injection rules.
    pub fn faults(&self) -> FaultConfig {
        self.faults.get()
    }

    /// How many faults were injected so far (errors by code, conflicts, timeouts, cut and
    /// expired watches).
    pub fn fault_counts(&self) -> FaultCounts {
        self.faults.counts()
    }

    /// Closes every open watch connection.
    pub fn drop_watches(&self) -> usize {
        self.registry.store.drop_watchers(None)
    }

    /// Makes admission webhooks that name Service `namespace/name` (on `port`, or any port for
    /// `None`) connect to `address`, e.g. a webhook server a test runs on 127.0.0.1. The Service
    /// must still exist and expose the port, as on a cluster. Replaces an earlier mapping.
    pub fn set_service_address(&self, service: &str, port: Option<u16>, address: SocketAddr) {
        self.admission.caller.set_service_address(ServiceAddress { service: service.to_string(), port, address });
    }

    /// Replaces the client certificates kube-sim presents to admission webhooks (by webhook host,
    /// as the kubeconfig of kube-apiserver's `WebhookAdmissionConfiguration` names them).
    pub fn set_admission_client_auth(&self, auth: ClientAuth) {
        self.admission.caller.set_client_auth(auth);
    }

    /// Every write request still in the bounded audit log, oldest first.
    pub fn audit(&self) -> AuditLog {
        self.audit.since(0)
    }

    /// Audit events after `id` (for reading the log incrementally).
    pub fn audit_since(&self, id: u64) -> AuditLog {
        self.audit.since(id)
    }

    /// Adds a bearer-token user at runtime and returns its token. Give each process its own
    /// user so fault rules (`FaultRule::users`) and the audit log can tell them apart; with
    /// the group `system:masters` it needs no RBAC.
    pub fn add_token_user(&self, user: TokenUser) -> String {
        self.auth.add_token(user)
    }

    /// Writes a kubeconfig for a new token user named `user` in `groups` (e.g.
    /// `&["system:masters"]` for a cluster admin) and returns its token.
    pub fn write_kubeconfig_for_user(&self, path: &Path, user: &str, groups: &[&str]) -> std::io::Result<String> {
        let token = self.add_token_user(TokenUser {
            user: user.to_string(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..TokenUser::default()
        });
        self.write_kubeconfig_for_token(path, &token)?;
        Ok(token)
    }

    /// A kubeconfig for the admin user, accepted by kubectl, Helm and kube-rs.
    pub fn kubeconfig(&self) -> String {
        kubeconfig_yaml(&self.url(), None)
    }

    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig())
    }

    /// A kubeconfig authenticating with a bearer token from the token file.
    pub fn write_kubeconfig_for_token(&self, path: &Path, token: &str) -> std::io::Result<()> {
        std::fs::write(path, kubeconfig_yaml(&self.url(), Some(token)))
    }

    /// An admin client.
    pub async fn client(&self) -> kube::Client {
        // Invariant: the URL is built from a socket address, and a client for a plain-HTTP
        // URL needs no I/O to construct, so neither step can fail.
        client_for(&self.url(), None).unwrap_or_else(|e| unreachable!("client for {}: {e}", self.url()))
    }

    /// A client authenticating with a bearer token.
    pub async fn client_for_token(&self, token: &str) -> Result<kube::Client, Error> {
        client_for(&self.url(), Some(token))
    }

    /// Stops the kubelet simulator, controllers and the server; open watches are closed.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        self.registry.store.drop_watchers(None);
        for t in self.background {
            if tokio::time::timeout(Duration::from_secs(10), t).await.is_err() {
                tracing::warn!("a kube-sim background task did not stop in time");
            }
        }
        let abort = self.server.abort_handle();
        if tokio::time::timeout(Duration::from_secs(5), self.server).await.is_err() {
            abort.abort();
        }
    }
}

fn client_for(url: &str, token: Option<&str>) -> Result<kube::Client, Error> {
    let uri: hyper::Uri = url.parse().map_err(|e: hyper::http::uri::InvalidUri| Error::Client {
        url: url.to_string(),
        source: Box::new(kube::Error::Service(Box::new(e))),
    })?;
    let mut config = kube::Config::new(uri);
    config.default_namespace = "default".into();
    if let Some(t) = token {
        config.auth_info.token = Some(t.to_string().into());
    }
    kube::Client::try_from(config).map_err(|source| Error::Client { url: url.to_string(), source: Box::new(source) })
}

fn kubeconfig_yaml(url: &str, token: Option<&str>) -> String {
    let user = match token {
        Some(t) => json!({"name": "kube-sim", "user": {"token": t}}),
        None => json!({"name": "kube-sim", "user": {}}),
    };
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kube-sim", "cluster": {"server": url}}],
        "users": [user],
        "contexts": [{"name": "kube-sim", "context": {"cluster": "kube-sim", "user": "kube-sim", "namespace": "default"}}],
        "current-context": "kube-sim",
        "preferences": {},
    });
    serde_yaml::to_string(&doc).unwrap_or_default()
}

/// Objects every cluster starts with: system namespaces, the `kubernetes` service and the
/// bootstrap RBAC policy.
fn bootstrap(registry: &registry::Registry) -> Result<(), Error> {
    let catalog = registry.catalog.clone();
    let mut ctx = registry::WriteCtx::internal("kube-apiserver");
    let get = |g: &str, v: &str, r: &str| {
        catalog.get(g, v, r).ok_or_else(|| Error::Bootstrap {
            what: r.to_string(),
            source: Box::new(status::ApiError::not_found_path()),
        })
    };
    let namespaces = get("", "v1", "namespaces")?;
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        registry
            .create(
                &namespaces,
                "",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                &mut ctx,
            )
            .map_err(|source| Error::Bootstrap { what: format!("namespace {ns}"), source: Box::new(source) })?;
    }
    let services = get("", "v1", "services")?;
    registry
        .create(
            &services,
            "default",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
                   "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}], "sessionAffinity": "None", "type": "ClusterIP"}}),
            &mut ctx,
        )
        .map_err(|source| Error::Bootstrap { what: "service kubernetes".into(), source: Box::new(source) })?;
    let classes = get("storage.k8s.io", "v1", "storageclasses")?;
    registry
        .create(&classes, "", volumes::default_storage_class(), &mut ctx)
        .map_err(|source| Error::Bootstrap { what: "storage class standard".into(), source: Box::new(source) })?;
    let apiservices = get("apiregistration.k8s.io", "v1", "apiservices")?;
    for obj in discovery::local_api_services(&catalog) {
        let (name, status) = (meta::name(&obj).to_string(), obj.get("status").cloned().unwrap_or_default());
        let error = |source| Error::Bootstrap { what: format!("apiservice {name}"), source: Box::new(source) };
        registry.create(&apiservices, "", obj.clone(), &mut ctx).map_err(error)?;
        // Created without status (as every write of the main resource), then made Available.
        registry.write_status_if_changed(&apiservices.storage, &name, |_| status.clone()).map_err(error)?;
    }
    for (storage, obj) in auth::bootstrap_policy() {
        let plural = storage.split('.').next().unwrap_or(storage);
        let rd = get("rbac.authorization.k8s.io", "v1", plural)?;
        registry
            .create(&rd, "", obj, &mut ctx)
            .map_err(|source| Error::Bootstrap { what: plural.to_string(), source: Box::new(source) })?;
    }
    Ok(())
}

/// Starts kube-sim (and the kubelet simulator when configured).
pub async fn start(config: SimConfig) -> Result<SimHandle, Error> {
    let authenticator = Arc::new(match &config.token_file {
        Some(p) => auth::Authenticator::from_file(p).map_err(Error::TokenFile)?,
        None => auth::Authenticator::default(),
    });
    let audit = Arc::new(audit::Audit::new(config.audit_capacity));
    let listener =
        tokio::net::TcpListener::bind(config.addr).await.map_err(|source| Error::Bind { addr: config.addr, source })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind { addr: config.addr, source })?;
    let store = store::Store::new(config.watch_history, config.watch_buffer);
    let catalog = Arc::new(resources::Catalog::new());
    let registry = Arc::new(registry::Registry::new(store.clone(), catalog));
    let events = store.subscribe_all();
    let workload_events = store.subscribe_all();
    bootstrap(&registry)?;
    let faults = Arc::new(faults::Faults::new(config.faults.clone()));
    let admission = Arc::new(admission::Admission::default());
    for a in &config.service_addresses {
        admission.caller.set_service_address(a.clone());
    }
    admission.caller.set_client_auth(config.admission_client_auth.clone());
    let pod_logs = Arc::new(logs::PodLogs::default());
    let state = Arc::new(server::AppState {
        registry: registry.clone(),
        faults: faults.clone(),
        audit: audit.clone(),
        auth: authenticator.clone(),
        openapi: openapi::OpenApiCache::default(),
        address: addr.to_string(),
        aggregated_discovery: config.aggregated_discovery,
        max_body: config.max_body_bytes,
        admission: admission.clone(),
        logs: pod_logs.clone(),
        components: componentstatus::Components { scheduler: config.kubelet.is_some() },
    });
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let mut server_shutdown = shutdown_rx.clone();
    let app = server::router(state);
    let server = tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                while !*server_shutdown.borrow() {
                    if server_shutdown.changed().await.is_err() {
                        break;
                    }
                }
            })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "kube-sim server stopped");
        }
    });
    let mut background = Vec::new();
    background.push(tokio::spawn(controllers::run(registry.clone(), events, shutdown_rx.clone())));
    background.push(tokio::spawn(workloads::run(
        registry.clone(),
        admission.clone(),
        workloads::WorkloadConfig { endpoint_propagation_delay: config.endpoint_propagation_delay },
        workload_events,
        shutdown_rx.clone(),
    )));
    {
        let store = store.clone();
        let mut stop = shutdown_rx.clone();
        let interval = config.bookmark_interval;
        background.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = tick.tick() => store.broadcast_bookmarks(),
                    r = stop.changed() => if r.is_err() || *stop.borrow() { return },
                }
            }
        }));
    }
    let url = format!("http://{addr}");
    if let Some(mut kcfg) = config.kubelet.clone() {
        // Containers running as processes reach the API server here.
        kcfg.api_server.get_or_insert(addr);
        let client = client_for(&url, None)?;
        let logs = pod_logs.clone();
        let stop = shutdown_rx.clone();
        background.push(tokio::spawn(async move {
            if let Err(e) = kubelet::run(client, kcfg, logs, stop).await {
                tracing::error!(error = %e, "kubelet simulator stopped");
            }
        }));
    }
    tracing::info!(%url, "kube-sim listening");
    Ok(SimHandle {
        addr,
        registry,
        faults,
        audit,
        auth: authenticator,
        admission,
        shutdown: shutdown_tx,
        server,
        background,
    })
}
