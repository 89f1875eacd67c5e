//! `HookTemplate` and `HookRun`: the checks that gate pod changes.
//!
//! Field names follow BCS (`COMMON/bcs-hook/apis/tkex/v1alpha1/hook_types.go` and the newer kourse types)
//! exactly, so existing manifests apply unchanged. Everything we add is optional and documented in the book
//! (docs/src/api/README.md, "API additions").

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema;

/// Bounds on what a tenant writes, enforced by the CRD schema and again by the hook-operator (an old CRD must
/// not be able to hurt it).
pub mod limits {
    /// Metrics of a template or run.
    pub const MAX_METRICS: usize = 32;
    /// Args of a template or run (runs also get the injected `PodName`, `PodIP`, `PodContainer[i]`, ...).
    pub const MAX_ARGS: usize = 128;
    /// Characters of an argument value.
    pub const MAX_ARG_VALUE: usize = 4096;
    /// Characters of a name (metric, argument, header, secret, key).
    pub const MAX_NAME: usize = 253;
    /// Characters of `successCondition` / `failureCondition`.
    pub const MAX_CONDITION: usize = 1024;
    /// Characters of a web `url` or a Prometheus `address`.
    pub const MAX_URL: usize = 2048;
    /// Characters of a web `body`.
    pub const MAX_BODY: usize = 16384;
    /// Characters of a Prometheus `query`, a header value or a kubernetes field value.
    pub const MAX_TEXT: usize = 4096;
    /// Characters of a `jsonPath` or a kubernetes field path.
    pub const MAX_PATH: usize = 1024;
    /// Headers of a web metric, fields of a kubernetes metric.
    pub const MAX_ITEMS: usize = 32;
    /// Largest `timeoutSeconds` of a web metric.
    pub const MAX_TIMEOUT_SECONDS: i64 = 300;
}

/// A reusable set of metrics. Workload controllers copy `metrics` and `policy` into every `HookRun` they create
/// and merge `args` with their own; the hook operator itself only validates templates.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "tkex.tencent.com",
    version = "v1alpha1",
    kind = "HookTemplate",
    plural = "hooktemplates",
    singular = "hooktemplate",
    shortname = "ht",
    namespaced,
    derive = "PartialEq",
    doc = "HookTemplate declares the checks (web, prometheus, kubernetes) that gate a pod deletion or update."
)]
#[serde(rename_all = "camelCase")]
pub struct HookTemplateSpec {
    /// The checks to run. At least one.
    #[schemars(length(min = 1, max = limits::MAX_METRICS))]
    pub metrics: Vec<Metric>,
    /// Declared parameters. A `value` may be omitted: the creator of the HookRun must then supply it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_ARGS))]
    pub args: Vec<Argument>,
    /// `Parallel` runs every metric at once; `Ordered` starts metric i only after metric i-1 is Successful.
    #[serde(default = "HookPolicy::default_some", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::hook_policy_with_default")]
    pub policy: Option<HookPolicy>,
}

/// One run of a template's metrics against concrete arguments (usually one pod).
// Printer columns repeat `type_ = ...`, which clippy mistakes for a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "tkex.tencent.com",
    version = "v1alpha1",
    kind = "HookRun",
    plural = "hookruns",
    singular = "hookrun",
    shortname = "hr",
    namespaced,
    derive = "PartialEq",
    status = "HookRunStatus",
    printcolumn(name = "PHASE", type_ = "string", json_path = ".status.phase", description = "HookRun phase"),
    printcolumn(name = "AGE", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(
        name = "METRIC",
        type_ = "string",
        json_path = ".status.metricResults[0].name",
        description = "The first metric",
        priority = 1
    ),
    printcolumn(
        name = "VALUE",
        type_ = "string",
        json_path = ".status.metricResults[0].measurements[-1].value",
        description = "The first metric's last measured value",
        priority = 1
    ),
    printcolumn(
        name = "SUCCESSFUL",
        type_ = "integer",
        json_path = ".status.metricResults[0].successful",
        description = "Successful measurements of the first metric",
        priority = 1
    ),
    printcolumn(
        name = "FAILED",
        type_ = "integer",
        json_path = ".status.metricResults[0].failed",
        description = "Failed measurements of the first metric",
        priority = 1
    ),
    printcolumn(
        name = "ERRORS",
        type_ = "integer",
        json_path = ".status.metricResults[0].error",
        description = "Measurements of the first metric that errored",
        priority = 1
    ),
    printcolumn(
        name = "MESSAGE",
        type_ = "string",
        json_path = ".status.message",
        description = "Why the run is in its phase; while Running, the last measurement error",
        priority = 1
    ),
    doc = "HookRun runs a set of metrics once and records their measurements and the resulting phase."
)]
#[serde(rename_all = "camelCase")]
pub struct HookRunSpec {
    /// What the run measures. Immutable: a gate must judge a pod by the probes the operator asked for, so an edited
    /// run is refused by the API server (and ignored by the gamedeployment-operator, which checks the spec hash).
    #[serde(default)]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "metrics are immutable: create a new HookRun instead"}]))]
    #[schemars(length(max = limits::MAX_METRICS))]
    pub metrics: Vec<Metric>,
    /// Resolved argument values, rendered into `{{ args.X }}` placeholders. Immutable, like `metrics`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "args are immutable: create a new HookRun instead"}]))]
    #[schemars(length(max = limits::MAX_ARGS))]
    pub args: Vec<Argument>,
    /// Stop taking new measurements and complete the run with what it has.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminate: bool,
    /// How the metrics are sequenced (copied from the template). Immutable, like `metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "policy is immutable: create a new HookRun instead"}]))]
    pub policy: Option<HookPolicy>,
}

/// How the metrics of a run are sequenced.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[schemars(transform = schema::plain_enum)]
pub enum HookPolicy {
    /// Every metric starts at once; the run ends when all of them have.
    #[default]
    Parallel,
    /// Metric i starts only after metric i-1 succeeded, so a later check runs only once an earlier one passed.
    Ordered,
}

impl HookPolicy {
    fn default_some() -> Option<Self> {
        Some(Self::Parallel)
    }
}

/// A named argument. `value` is optional in a template and required (resolved) in a run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Argument {
    /// Referred to as `{{args.<name>}}` in URLs, headers, bodies and queries. The gamedeployment-operator sets
    /// `PodName`, `PodNamespace`, `PodIP`, `HostIP`, `PodContainer[i]` (and `ModifiedContainer[i]` for pre-inplace
    /// hooks) itself.
    #[schemars(length(min = 1, max = limits::MAX_NAME))]
    pub name: String,
    /// The value. In a template it may be left out (a default the workload must supply); in a run every arg has
    /// a value or a `valueFrom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_ARG_VALUE))]
    pub value: Option<String>,
    /// Addition (as Argo Rollouts): read the value from a Secret in the HookRun's namespace when a measurement
    /// is taken, instead of writing it into the spec. Needs the hook-operator's `--secret-args` (chart value
    /// `hookOperator.secretArgs.enabled`). The value never appears in status, Events or logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<ArgumentValueFrom>,
}

impl Argument {
    /// A literal argument, as the operators inject `PodName`, `PodIP` and the rest into the runs they make.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self { name: name.into(), value: Some(value.into()), value_from: None }
    }

    /// Whether the argument has a value, literal or from a Secret.
    pub fn is_set(&self) -> bool {
        self.value.is_some() || self.value_from.as_ref().is_some_and(|v| v.secret_key_ref.is_some())
    }
}

/// Where an argument's value comes from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArgumentValueFrom {
    /// A key of a Secret in the HookRun's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeyRef>,
}

/// A key of a Secret in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = limits::MAX_NAME))]
    pub name: String,
    /// The key in the Secret's data.
    #[schemars(length(min = 1, max = limits::MAX_NAME))]
    pub key: String,
}

/// One check: how to measure (provider), how often (interval, count) and how to judge (conditions, limits).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metric {
    /// Unique within the run.
    #[schemars(length(min = 1, max = limits::MAX_NAME))]
    pub name: String,
    /// Time between the end of one measurement and the start of the next (Go duration: `30s`, `1m30s`,
    /// `500ms`). Without it the metric is measured `count` times back to back (once when `count` is 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::duration_string")]
    pub interval: Option<String>,
    /// Delay before the first measurement, counted from `status.startedAt` of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::duration_string")]
    pub initial_delay: Option<String>,
    /// Number of measurements to take. 0 or unset: one measurement when `interval` is not set either; with only an
    /// `interval`, measurements go on until a limit decides or the run is terminated.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0))]
    pub count: i32,
    /// expr expression over `result`; true makes the measurement Successful.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_CONDITION))]
    pub success_condition: Option<String>,
    /// expr expression over `result`; true makes the measurement Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_CONDITION))]
    pub failure_condition: Option<String>,
    /// The metric fails when more than this many measurements failed. 0 (default): the first failure fails;
    /// -1: never fail on failed measurements.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = -1))]
    pub failure_limit: i32,
    /// The metric succeeds once this many measurements succeeded (0 = not used).
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0))]
    pub successful_limit: i32,
    /// The metric is Inconclusive when more than this many measurements were inconclusive.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0))]
    pub inconclusive_limit: i32,
    /// The metric errors when more than this many consecutive measurements errored (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub consecutive_error_limit: Option<i32>,
    /// The metric succeeds once this many consecutive measurements succeeded (unset = not used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub consecutive_successful_limit: Option<i32>,
    /// Where each measurement comes from. Exactly one provider must be set: `web`, `prometheus` or `kubernetes`
    /// (`exec` is refused).
    pub provider: MetricProvider,
}

impl Metric {
    /// How many measurements count towards completion: `count` if set; 1 when neither `count` nor `interval` is
    /// set; unbounded (`None`) with only an interval, until a limit decides or the run terminates. The
    /// hook-operator's engine and `kubectl gd plan`'s forecast both count by this one rule.
    pub fn effective_count(&self) -> Option<i32> {
        if self.count > 0 {
            Some(self.count)
        } else if self.interval.as_deref().is_none_or(|i| i.trim().is_empty()) {
            Some(1)
        } else {
            None
        }
    }
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// Exactly one provider must be set: `web`, `prometheus` or `kubernetes` (`exec` is refused).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
// `exec` stays declared (BCS manifests name the type) but the API server refuses it, with what to use instead.
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.exec)",
    "message": "the exec provider is not supported (BCS declares it but never implemented it): use a web or kubernetes provider instead (or prometheus)"
}]))]
pub struct MetricProvider {
    /// An HTTP call whose JSON answer is judged by the conditions (to any endpoint the egress policy allows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web: Option<WebMetric>,
    /// An instant query against a Prometheus server; its result is judged by the conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusMetric>,
    /// Reads or patches annotations of the object named by the run's args (BCS semantics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesMetric>,
    /// Declared by the kourse API for compatibility; refused: use a web or kubernetes provider instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecMetric>,
}

/// An HTTP call whose JSON answer is judged by the conditions.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebMetric {
    /// Templated with `{{ args.X }}`.
    #[schemars(length(min = 1, max = limits::MAX_URL))]
    pub url: String,
    /// Header values are templated with `{{ args.X }}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::MAX_ITEMS))]
    pub headers: Vec<WebMetricHeader>,
    /// Request timeout; 0 or unset means 10 seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = limits::MAX_TIMEOUT_SECONDS))]
    pub timeout_seconds: Option<i64>,
    /// Kubernetes-style JSONPath into the response (`{$.age}`, `{.items[0].name}`, `$.age`). Unset: the whole
    /// document is the result.
    #[serde(default, rename = "jsonPath", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_PATH))]
    pub json_path: Option<String>,
    /// Addition: HTTP method (default `GET`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::http_method")]
    pub method: Option<String>,
    /// Addition: request body (templated), sent with `method`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::MAX_BODY))]
    pub body: Option<String>,
    /// Addition: skip TLS certificate verification (for self-signed endpoints).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
}

/// One request header of a web metric.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebMetricHeader {
    /// Header name (`Authorization`, `X-Pod`). Values of credential headers are masked in status and Events.
    #[schemars(length(min = 1, max = limits::MAX_NAME))]
    pub key: String,
    /// Header value; templated with `{{ args.X }}`.
    #[schemars(length(max = limits::MAX_TEXT))]
    pub value: String,
}

/// An instant query against a Prometheus server.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusMetric {
    /// Base URL of the Prometheus server (`http://prometheus.monitoring:9090`); the query goes to
    /// `<address>/api/v1/query`. The web provider's egress policy applies.
    #[schemars(length(min = 1, max = limits::MAX_URL))]
    pub address: String,
    /// Templated with `{{ args.X }}`.
    #[schemars(length(min = 1, max = limits::MAX_TEXT))]
    pub query: String,
}

/// Reads or patches annotations of the object named by the run's args (BCS semantics).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesMetric {
    /// The fields to compare (`get`) or write (`patch`), all in one read or one atomic patch.
    #[schemars(length(min = 1, max = limits::MAX_ITEMS))]
    pub fields: Vec<KubernetesField>,
    /// `get` (compare) or `patch` (write).
    pub function: String,
}

/// One annotation a kubernetes metric compares or writes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesField {
    /// `metadata.annotations.<key>`.
    #[schemars(length(min = 1, max = limits::MAX_PATH))]
    pub path: String,
    /// `get`: the value the field must have; `patch`: the value written.
    #[schemars(length(max = limits::MAX_TEXT))]
    pub value: String,
}

/// Declared by the kourse API; refused by the CRD and by the hook-operator (use a web or kubernetes provider).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecMetric {
    /// Container to run the command in (the exec provider is refused).
    pub container: String,
    /// Command to run (the exec provider is refused).
    pub command: Vec<String>,
}

/// Observed state of a run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookRunStatus {
    /// The run's verdict: `Successful` opens the gate that made the run; unset until the run is first reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<HookPhase>,
    /// Why the run is in its phase, when that is not obvious from the metric results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the run was first reconciled; `initialDelay` counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// One entry per metric of the spec that has started: its phase, counters and recent measurements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metric_results: Vec<MetricResult>,
}

/// Phase of a run, a metric or a measurement.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[schemars(transform = schema::plain_enum)]
pub enum HookPhase {
    /// Not started: a run or metric waiting for its `initialDelay` or, with `Ordered`, for the metric before it.
    Pending,
    /// Measurements are being taken.
    Running,
    /// The success condition held as often as the limits ask: the only phase that opens a gate.
    Successful,
    /// More measurements failed the condition than `failureLimit` allows.
    Failed,
    /// Measurements could not be taken (unreachable endpoint, timeout, bad answer) more often than
    /// `consecutiveErrorLimit` allows.
    Error,
    /// Neither condition decided more often than `inconclusiveLimit` allows; a person has to look.
    Inconclusive,
}

impl HookPhase {
    /// A completed phase never changes again.
    pub fn is_completed(self) -> bool {
        matches!(self, Self::Successful | Self::Failed | Self::Error | Self::Inconclusive)
    }

    /// The name written in status and printed by kubectl (also the `Display` form).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::Successful => "Successful",
            Self::Failed => "Failed",
            Self::Error => "Error",
            Self::Inconclusive => "Inconclusive",
        }
    }
}

impl std::fmt::Display for HookPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Cumulative counters and the most recent measurements of one metric.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricResult {
    /// The metric's name in the spec.
    pub name: String,
    /// The metric's verdict so far; the run's phase is derived from its metrics' phases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<HookPhase>,
    /// The most recent measurements (10 by default); the counters below are never trimmed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measurements: Vec<Measurement>,
    /// Why the metric ended in its phase (`count (3) reached`, `failed (3) > failureLimit (2)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Measurements that counted towards `count` (errors do not).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub count: i32,
    /// Successful measurements so far.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub successful: i32,
    /// Failed measurements so far; more than `failureLimit` fails the metric.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: i32,
    /// Inconclusive measurements so far; more than `inconclusiveLimit` makes the metric Inconclusive.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub inconclusive: i32,
    /// Measurements that could not be taken (unreachable endpoint, timeout, bad answer) so far.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub error: i32,
    /// Errors in a row; more than `consecutiveErrorLimit` (default 4) ends the metric `Error`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub consecutive_error: i32,
    /// Successful measurements in a row (for `consecutiveSuccessfulLimit`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub consecutive_successful: i32,
}

/// One call of a provider and its verdict.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Measurement {
    /// This measurement's verdict: `Successful`, `Failed`, `Inconclusive` or `Error`, or `Running` while taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<HookPhase>,
    /// What went wrong (an Error: `GET http://…: cannot connect: Connection refused`) or which condition decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the provider was called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the answer (or the error) came back; unset while the measurement is in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// When the next measurement of this metric is due (set when the metric keeps running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_at: Option<Time>,
    /// The extracted value, rendered as text (`"45"`, `"bryan"`, `[1,2]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A reference from a workload to a HookTemplate plus extra args (`preDeleteUpdateStrategy.hook`, canary
/// `steps[].hook`, ...).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookStep {
    /// Name of a HookTemplate in the workload's namespace.
    pub template_name: String,
    /// Arguments passed to the HookRun in addition to the ones the operator supplies (`PodIP`, `PodName`,
    /// `PodNamespace`, ...); they override the template's default values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<HookRunArgument>,
}

/// An argument given by a workload; unlike a template argument its value is always set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookRunArgument {
    /// The argument's name, as the template refers to it in `{{ args.<name> }}`.
    pub name: String,
    /// The argument's value.
    #[serde(default)]
    #[schemars(length(max = limits::MAX_ARG_VALUE))]
    pub value: String,
    /// Addition (as Argo Rollouts): read the value from a Secret in the namespace when the measurement is taken
    /// (see the HookTemplate's `args[].valueFrom`); `value` is then ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<ArgumentValueFrom>,
}
