//! Measurement providers. Each one turns a metric (and the run's args) into an [`Observation`]: the value the
//! conditions judge, or a verdict of its own. The engine never knows which provider it runs.

pub mod http;
pub(crate) mod kubernetes;
pub mod prometheus;
pub(crate) mod redact;
pub mod web;

use std::sync::Arc;
use std::time::Duration;

use common::api::{Argument, Metric};
use futures::FutureExt;
use futures::future::BoxFuture;

// What a provider saw and its errors are the answer's vocabulary ([`crate::answer`]), which the evaluation workers
// read too.
pub(crate) use crate::answer::display;
pub use crate::answer::{Observation, ProviderError};

/// What a provider got back.
#[derive(Debug)]
pub enum Answer {
    /// A value already read (the kubernetes provider's fields, bounded by the API server's object size).
    Observed(Observation),
    /// An answer as received, read (decoded, narrowed by the jsonPath) only under the evaluation bounds
    /// (see [`crate::isolation`]).
    Raw(Raw),
}

/// An answer's bytes and where they came from.
#[derive(Debug)]
pub struct Raw {
    /// Holds its share of the buffered-bytes budget until the answer is judged.
    pub response: http::Response,
    /// What was asked: how the answer is read.
    pub source: Source,
}

/// What was asked, to read the answer with (kept as the provider had it: nothing is formatted or copied unless an
/// error message or a worker needs it).
#[derive(Debug)]
pub enum Source {
    /// A web metric's request, as its run keeps it (see [`Kept`]).
    Web(Arc<web::Request>),
    /// A Prometheus query.
    Prometheus {
        /// The PromQL query, rendered.
        query: String,
    },
}

impl Raw {
    /// Whether reading this answer is cheap by construction (see [`crate::isolation`]): small, and without a
    /// path that can multiply it.
    pub fn cheap(&self) -> bool {
        self.response.body.len() <= crate::isolation::INLINE_BODY_BYTES
            && match &self.source {
                Source::Web(request) => request.path.as_ref().is_none_or(|p| p.is_members_only()),
                Source::Prometheus { .. } => true,
            }
    }

    /// Reads the answer here, on the calling thread: only for a [`Raw::cheap`] one.
    pub fn read(&self) -> Result<Observation, ProviderError> {
        let body = &self.response.body;
        match &self.source {
            Source::Web(request) => {
                let web::Request { method, url, path, .. } = &**request;
                crate::answer::web::interpret_named(|| format!("{method} {url}"), body, path.as_deref())
            }
            Source::Prometheus { query } => crate::answer::prometheus::interpret(body, query),
        }
    }

    /// How an evaluation worker reads it.
    pub fn reading(&self) -> crate::isolation::Reading {
        match &self.source {
            Source::Web(request) => crate::isolation::Reading::Web {
                what: format!("{} {}", request.method, request.url),
                path: request.path.as_ref().map(|p| p.written().to_string()),
            },
            Source::Prometheus { query } => crate::isolation::Reading::Prometheus { query: query.clone() },
        }
    }
}

/// Largest buffer a run keeps between its measurements (its answer's body, its request as sent): the answers hooks
/// give (a few fields of JSON) and their requests fit. A buffer a larger answer or request grew is dropped after the
/// measurement, so one huge answer does not hold its memory for the rest of the run (and thousands of runs keep
/// little each).
pub const KEPT_BUFFER_BYTES: usize = 1024;

/// What a run keeps of one metric from one measurement to the next. Within a generation of the run's spec its
/// template and args are fixed, so its web request is rendered once, and the buffers of the exchange serve every
/// measurement: before, each measurement rendered the request again and allocated both buffers anew. Whoever keeps
/// it (the dispatcher, per run and metric) starts over with a new one when the spec changes.
#[derive(Debug, Default)]
pub struct Kept {
    /// The web request as rendered (none before the first web measurement, or while args come from Secrets).
    web: Option<Arc<web::Request>>,
    /// The request as sent and the answer's body.
    buffers: http::Buffers,
}

impl Kept {
    /// Forgets the rendered request: args read from Secrets may differ from one measurement to the next, so a request
    /// rendered with them is rendered anew each time (and not kept after its measurement).
    pub fn forget_request(&mut self) {
        self.web = None;
    }

    /// The rendered request kept (tests).
    #[cfg(test)]
    pub(crate) fn request(&self) -> Option<&Arc<web::Request>> {
        self.web.as_ref()
    }

    /// Takes back an answer's body once it was read, as the buffer of the next answer.
    pub(crate) fn keep_answer(&mut self, body: Vec<u8>) {
        self.buffers.answer = body;
    }

    /// After a measurement: a buffer that a large answer or request grew past [`KEPT_BUFFER_BYTES`] is dropped, the
    /// others are emptied for the next one.
    pub fn tidy(&mut self) {
        for buffer in [&mut self.buffers.wire, &mut self.buffers.answer] {
            if buffer.capacity() > KEPT_BUFFER_BYTES {
                *buffer = Vec::new();
            } else {
                buffer.clear();
            }
        }
    }

    /// Bytes its buffers hold (tests).
    #[cfg(test)]
    pub(crate) fn buffer_bytes(&self) -> usize {
        self.buffers.wire.capacity() + self.buffers.answer.capacity()
    }
}

/// What a provider's measurement ends with: the answer, or why there is none.
pub type Measured = Result<Answer, ProviderError>;

/// One kind of measurement, in the shape of Argo Rollouts' `metricproviders.Provider`.
pub trait Provider: Send + Sync {
    /// `web`, `prometheus` or `kubernetes`: the `provider` label of the operator's metrics.
    fn kind(&self) -> &'static str;
    /// How long a measurement may take before it is abandoned as an Error.
    fn timeout(&self, metric: &Metric) -> Duration;
    /// Whether [`Provider::measure`] always ends by [`Provider::timeout`] on its own. The engine then adds no timer
    /// of its own per measurement; otherwise it abandons the measurement a little after the timeout.
    fn bounds_itself(&self) -> bool {
        false
    }
    /// Takes one measurement for a run in `namespace` (the kubernetes provider stays inside it), with what the run
    /// kept from its previous measurement of the metric.
    fn measure<'a>(
        &'a self,
        namespace: &'a str,
        metric: &'a Metric,
        args: &'a [Argument],
        kept: &'a mut Kept,
    ) -> BoxFuture<'a, Result<Answer, ProviderError>>;
}

/// A [`Provider`] as each one is written: its measurement a plain `async fn`. [`Provider`] is what the engine holds,
/// behind `dyn` (it never knows which provider it runs), and a `dyn` trait cannot have an `async fn`; so it is
/// implemented once, below, for every `AsyncProvider`, boxing the measurement's future, instead of each provider
/// wrapping its own `async fn` in the same boxed [`Provider::measure`].
pub trait AsyncProvider: Send + Sync {
    /// [`Provider::kind`].
    const KIND: &'static str;
    /// [`Provider::bounds_itself`].
    const BOUNDS_ITSELF: bool = false;
    /// [`Provider::timeout`].
    fn timeout(&self, metric: &Metric) -> Duration;
    /// [`Provider::measure`], not boxed.
    fn measure(
        &self,
        namespace: &str,
        metric: &Metric,
        args: &[Argument],
        kept: &mut Kept,
    ) -> impl Future<Output = Result<Answer, ProviderError>> + Send;
}

impl<P: AsyncProvider> Provider for P {
    fn kind(&self) -> &'static str {
        P::KIND
    }

    fn timeout(&self, metric: &Metric) -> Duration {
        AsyncProvider::timeout(self, metric)
    }

    fn bounds_itself(&self) -> bool {
        P::BOUNDS_ITSELF
    }

    fn measure<'a>(
        &'a self,
        namespace: &'a str,
        metric: &'a Metric,
        args: &'a [Argument],
        kept: &'a mut Kept,
    ) -> BoxFuture<'a, Result<Answer, ProviderError>> {
        AsyncProvider::measure(self, namespace, metric, args, kept).boxed()
    }
}

/// Limits and test aids shared by the providers.
#[derive(Debug, Clone)]
pub struct ProviderSettings {
    /// Largest response body read from a web endpoint or Prometheus.
    pub max_body_bytes: usize,
    /// `host:port` → `addr:port` rewrites for web and Prometheus URLs (test and sandbox aid, like `curl --resolve`).
    pub resolve: Vec<http::Resolve>,
    /// Timeout of a Prometheus query (`--prometheus-timeout`).
    pub prometheus_timeout: Duration,
    /// Timeout of a kubernetes provider call (`--kubernetes-timeout`).
    pub kubernetes_timeout: Duration,
    /// Idle keep-alive connections are closed after this long. Hook endpoints are usually one pod each,
    /// measured every `interval`: keeping a connection only pays off for short intervals, and every idle
    /// connection costs memory.
    pub idle_timeout: Duration,
    /// Idle connections kept per host (one host answering many runs, e.g. a shared service).
    pub max_idle_per_host: usize,
    /// Time and memory of one condition evaluation.
    pub condition_limits: crate::conditions::budget::Limits,
    /// Threads or worker processes evaluating conditions (0: one per CPU, at least 2).
    pub condition_threads: usize,
    /// Where evaluations that are not cheap by construction run (see [`crate::isolation`]).
    pub isolation: crate::isolation::Isolation,
    /// How long a namespace whose evaluation hit a bound stays in the penalty lane.
    pub condition_penalty: Duration,
    /// Which addresses web and Prometheus requests may reach.
    pub egress: http::egress::Policy,
    /// Resources the kubernetes provider may touch (`pods`, `apps/deployments`).
    pub kubernetes_kinds: Vec<String>,
    /// Response bytes buffered at once across all measurements.
    pub max_buffered_body_bytes: usize,
    /// Whether args may read their value from a Secret (`valueFrom.secretKeyRef`, `--secret-args`).
    pub secret_args: bool,
    /// The client of plain-HTTP requests to IP addresses: the operator's own, or hyper's for `hook-bench`'s
    /// comparison (no operator flag).
    pub plain_client: http::hyper_baseline::PlainClient,
}

impl Default for ProviderSettings {
    fn default() -> Self {
        Self {
            max_body_bytes: 1024 * 1024,
            resolve: Vec::new(),
            prometheus_timeout: Duration::from_secs(30),
            kubernetes_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            max_idle_per_host: 1024,
            condition_limits: crate::conditions::budget::Limits::default(),
            condition_threads: 0,
            isolation: crate::isolation::Isolation::Threads,
            condition_penalty: Duration::from_secs(300),
            egress: http::egress::Policy::default(),
            kubernetes_kinds: vec!["pods".to_string()],
            max_buffered_body_bytes: 16 * 1024 * 1024,
            secret_args: false,
            plain_client: http::hyper_baseline::PlainClient::Own,
        }
    }
}

/// One of the providers (see [`Providers::choose`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    /// `provider.web`.
    Web,
    /// `provider.prometheus`.
    Prometheus,
    /// `provider.kubernetes`.
    Kubernetes,
}

/// Every provider, built once per process (HTTP connection pools, discovery caches).
pub struct Providers {
    /// Where answers are read and conditions evaluated (see [`crate::isolation`]).
    pub conditions: crate::isolation::Evaluator,
    web: web::Web,
    prometheus: prometheus::Prometheus,
    kubernetes: kubernetes::Kubernetes,
    kube: Option<kube::Client>,
    http: Arc<http::Http>,
    secret_args: bool,
    kubernetes_timeout: Duration,
}

impl Providers {
    /// `kube` is the operator's own client; without it (the `check` command outside a cluster) the kubernetes
    /// provider reports an Error measurement that says so.
    pub fn new(settings: &ProviderSettings, kube: Option<kube::Client>) -> Result<Arc<Self>, ProviderError> {
        let http = Arc::new(http::Http::new(settings)?);
        let threads = match settings.condition_threads {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get()).max(2),
            n => n,
        };
        let conditions = match &settings.isolation {
            crate::isolation::Isolation::Threads => crate::isolation::Evaluator::Threads(
                crate::conditions::budget::Pool::new(threads, settings.condition_limits),
            ),
            crate::isolation::Isolation::Processes(binary) => {
                let limits = settings.condition_limits;
                crate::isolation::Evaluator::Processes(
                    crate::isolation::workers::Workers::start(crate::isolation::workers::Settings {
                        binary: binary.clone(),
                        // Each worker may hold a job's body and its memory budget at once: a fixed default
                        // keeps the operator's memory independent of the node's CPU count.
                        workers: if settings.condition_threads == 0 { 2 } else { settings.condition_threads },
                        limits,
                        max_body_bytes: settings.max_body_bytes,
                        penalty: settings.condition_penalty,
                        queue_timeout: (limits.timeout * 10).max(Duration::from_secs(30)),
                    })
                    .map_err(ProviderError)?,
                )
            }
        };
        Ok(Arc::new(Self {
            http: http.clone(),
            conditions,
            web: web::Web::new(http.clone()),
            prometheus: prometheus::Prometheus::new(http, settings.prometheus_timeout),
            kubernetes: kubernetes::Kubernetes::new(
                kube.clone(),
                settings.kubernetes_timeout,
                &settings.kubernetes_kinds,
            ),
            kube,
            secret_args: settings.secret_args,
            kubernetes_timeout: settings.kubernetes_timeout,
        }))
    }

    /// The run's args with every `valueFrom.secretKeyRef` replaced by the Secret's value (read from the run's
    /// namespace now), and the values that came from Secrets (to be redacted from every message).
    pub async fn resolve_args<'a>(
        &self,
        namespace: &str,
        args: &'a [Argument],
    ) -> Result<(std::borrow::Cow<'a, [Argument]>, Vec<String>), ProviderError> {
        // The common case (no arg reads a Secret) borrows: no copy of the args per measurement.
        if args.iter().all(|a| a.value_from.as_ref().and_then(|v| v.secret_key_ref.as_ref()).is_none()) {
            return Ok((std::borrow::Cow::Borrowed(args), Vec::new()));
        }
        let mut resolved = Vec::with_capacity(args.len());
        let mut secrets = Vec::new();
        for arg in args {
            let Some(reference) = arg.value_from.as_ref().and_then(|v| v.secret_key_ref.as_ref()) else {
                resolved.push(arg.clone());
                continue;
            };
            let what = format!("args.{}: Secret {namespace}/{} key {:?}", arg.name, reference.name, reference.key);
            if !self.secret_args {
                return Err(ProviderError(format!(
                    "{what}: reading args from Secrets is disabled; start the hook-operator with --secret-args (chart \
                     value hookOperator.secretArgs.enabled=true)"
                )));
            }
            let client = self
                .kube
                .as_ref()
                .ok_or_else(|| ProviderError(format!("{what}: no Kubernetes configuration to read it with")))?;
            let api: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(client.clone(), namespace);
            let secret = tokio::time::timeout(self.kubernetes_timeout, api.get_opt(&reference.name))
                .await
                .map_err(|_| ProviderError(format!("{what}: no answer from the API server in time")))?
                .map_err(|e| ProviderError(format!("{what}: {}", crate::text::excerpt(&e.to_string(), 300))))?
                .ok_or_else(|| ProviderError(format!("{what}: the Secret does not exist")))?;
            let bytes = secret
                .data
                .as_ref()
                .and_then(|d| d.get(&reference.key))
                .map(|b| b.0.clone())
                .or_else(|| {
                    secret.string_data.as_ref().and_then(|d| d.get(&reference.key)).map(|s| s.clone().into_bytes())
                })
                .ok_or_else(|| ProviderError(format!("{what}: the Secret has no such key")))?;
            let value =
                String::from_utf8(bytes).map_err(|_| ProviderError(format!("{what}: the value is not UTF-8 text")))?;
            secrets.push(value.clone());
            resolved.push(Argument { name: arg.name.clone(), value: Some(value), value_from: None });
        }
        Ok((std::borrow::Cow::Owned(resolved), secrets))
    }

    /// The most web/Prometheus response bytes that were buffered at once so far.
    pub fn peak_buffered_bytes(&self) -> usize {
        self.http.peak_buffered_bytes()
    }

    /// The provider the metric names; an error when it names none, several, or the refused `exec`.
    pub fn for_metric(&self, metric: &Metric) -> Result<&dyn Provider, ProviderError> {
        Ok(self.provider(Self::choose(metric)?))
    }

    /// The provider `which` is, as the engine sees every provider.
    pub(crate) fn provider(&self, which: Which) -> &dyn Provider {
        match which {
            Which::Web => &self.web,
            Which::Prometheus => &self.prometheus,
            Which::Kubernetes => &self.kubernetes,
        }
    }

    /// Takes one measurement with the provider `which` (see [`Provider::measure`]), called as itself: its future is
    /// part of the caller's, not one boxed per measurement as through `dyn Provider`.
    pub(crate) async fn measure(
        &self,
        which: Which,
        namespace: &str,
        metric: &Metric,
        args: &[Argument],
        kept: &mut Kept,
    ) -> Result<Answer, ProviderError> {
        match which {
            Which::Web => AsyncProvider::measure(&self.web, namespace, metric, args, kept).await,
            Which::Prometheus => AsyncProvider::measure(&self.prometheus, namespace, metric, args, kept).await,
            Which::Kubernetes => AsyncProvider::measure(&self.kubernetes, namespace, metric, args, kept).await,
        }
    }

    /// Which provider the metric names; an error when it names none, several, or the refused `exec`.
    pub(crate) fn choose(metric: &Metric) -> Result<Which, ProviderError> {
        let p = &metric.provider;
        match (&p.web, &p.prometheus, &p.kubernetes, &p.exec) {
            (Some(_), None, None, None) => Ok(Which::Web),
            (None, Some(_), None, None) => Ok(Which::Prometheus),
            (None, None, Some(_), None) => Ok(Which::Kubernetes),
            (None, None, None, Some(_)) => Err(ProviderError(
                "provider.exec is not supported by this operator: use a web or kubernetes provider instead".into(),
            )),
            (None, None, None, None) => Err(ProviderError(format!("metric {:?} has no provider", metric.name))),
            _ => Err(ProviderError(format!("metric {:?} sets several providers", metric.name))),
        }
    }
}
