//! Admission webhooks served by every replica of the operator over HTTPS (not only the leader), so a drain or a
//! `kubectl delete` is answered while a standby waits for the Lease:
//!
//! - **the pod gate** (`/validate-pods`): a `DELETE` of a pod of a GameDeployment that opted in (annotation
//!   [`POD_GATE`]), or a `CREATE` of its `pods/eviction`, that the operator did not send itself is refused; the pod
//!   is marked instead (label [`SPECIFIED_DELETE`], annotation [`MARKED_AT`]) and the operator deletes it through
//!   its pre-delete hook and replaces it;
//! - **deletion protection** (`/validate-workload`, BCS's path): `DELETE` of GameDeployments and HookTemplates
//!   honours the BCS label `io.tencent.bcs.dev/deletion-allow`.
//!
//! The decisions are pure ([`verdict`]); [`server`] takes the objects they need from the request and from every
//! replica's watch caches ([`caches`]), reads only what a cache cannot vouch for (within a budget), writes the mark
//! and answers — "retry" (429) whenever it cannot judge, never "allowed"; [`tls`] serves the certificate the chart provides and
//! reloads it when the mounted Secret changes; [`labeller`] (leader only) keeps the label [`POD_GATE`] on the pods
//! of opted-in GameDeployments, which is what the webhook configuration's `objectSelector` matches, so no other
//! pod deletion in the cluster ever calls the webhook.

pub(crate) mod admission;
pub mod caches;
pub(crate) mod labeller;
pub mod metrics;
pub mod server;
pub(crate) mod tls;
pub(crate) mod validation;
pub(crate) mod verdict;

/// GameDeployment annotation `"true"`: opt in to the pod gate. Pod label `"true"`: the pod's GameDeployment opted
/// in (set by the operator; the webhook configuration's `objectSelector`).
pub const POD_GATE: &str = "gamedeployment.tkex.tencent.com/pod-gate";
/// GameDeployment annotation (a Go duration, e.g. `30m`): how long a marked pod waits for its hook before a delete
/// or eviction is allowed anyway (default: the operator's `--pod-gate-deadline`).
pub const POD_GATE_DEADLINE: &str = "gamedeployment.tkex.tencent.com/pod-gate-deadline";
/// Pod annotation `"true"`: the escape hatch; the pod may be deleted or evicted without its hook. Whoever may patch
/// pods may set it.
pub const GATE_BYPASS: &str = "gamedeployment.tkex.tencent.com/gate-bypass";
/// Pod annotation (RFC 3339): when the webhook first refused a deletion of the pod and marked it; the deadline
/// counts from here.
pub const MARKED_AT: &str = "gamedeployment.tkex.tencent.com/delete-requested-at";
/// Pod label `"true"` (OpenKruise vocabulary): the operator deletes the pod through `PreparingDelete` and its
/// pre-delete hook, then replaces it. The webhook's mark.
pub use common::keys::SPECIFIED_DELETE;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use common::runtime::flags::parse_duration;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::PostParams;
use kube::{Api, Client};

use self::server::WebhookConfig;
use self::tls::CertFiles;
use self::verdict::{DeletionAllow, GateSettings};

/// The webhook flags of the binary.
#[derive(clap::Args, Debug, Clone)]
pub struct WebhookFlags {
    /// Serve the admission webhooks (pod gate, deletion protection) over HTTPS on this address, e.g.
    /// `0.0.0.0:9443`. Off when absent.
    #[arg(long, value_name = "ADDRESS")]
    pub webhook_address: Option<SocketAddr>,
    /// Directory holding the serving certificate `tls.crt` and its key `tls.key` (re-read when they change).
    #[arg(long, value_name = "DIR", default_value = "/etc/gamedeployment-operator/webhook-tls")]
    pub webhook_cert_dir: PathBuf,
    /// The user the operator's own requests carry (its ServiceAccount, `system:serviceaccount:NS:NAME`): its pod
    /// deletions already passed the hook gate and are allowed. Repeatable. Default: who the API says this process
    /// is (a SelfSubjectReview at start-up).
    #[arg(long = "webhook-operator-user", value_name = "USER")]
    pub operator_users: Vec<String>,
    /// Members of this group may delete a gated pod with `--grace-period=0 --force`, skipping its hook. Repeatable.
    #[arg(long = "pod-gate-privileged-group", value_name = "GROUP", default_value = "system:masters")]
    pub privileged_groups: Vec<String>,
    /// How long a pod marked by the pod gate waits for its hook before a delete or eviction is allowed anyway
    /// (a GameDeployment overrides it with the annotation `gamedeployment.tkex.tencent.com/pod-gate-deadline`).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub pod_gate_deadline: Duration,
    /// The longest pod-gate deadline any GameDeployment gets: a longer annotation (or `--pod-gate-deadline`) is cut
    /// to this, and the webhook's answer says so. Bounds how long one tenant can hold up a drain or a scale-down.
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_duration)]
    pub max_pod_gate_deadline: Duration,
    /// Users whose deletions and evictions of gated pods are the node lifecycle's (a failed or deleted node): let
    /// through with a Warning Event `NodeLifecycleDeletion`. Repeatable; one empty value gates them like anyone.
    /// Default: the taint-eviction controller, the node lifecycle controller and the pod garbage collector of
    /// kube-controller-manager (`--use-service-account-credentials`).
    #[arg(long = "pod-gate-node-lifecycle-user", value_name = "USER", default_values_t = verdict::NODE_LIFECYCLE_USERS.map(String::from))]
    pub node_lifecycle_users: Vec<String>,
    /// CA (PEM file) that signs the client certificate the API server presents to the webhooks (kube-apiserver's
    /// `--admission-control-config-file` → `WebhookAdmissionConfiguration` kubeconfig, a user named after the
    /// webhook Service's host). A caller with a certificate from this CA is verified; one with another certificate
    /// fails the TLS handshake; one without is unverified (see `--webhook-unverified-may-mark`). Without this flag
    /// every caller is unverified. Read at start-up.
    #[arg(long, value_name = "FILE")]
    pub webhook_client_ca: Option<PathBuf>,
    /// Let callers without a verified client certificate cause writes: the pod gate's mark (a deletion through the
    /// pre-delete hook) and its Events. Off (the default): their requests are answered, allowed or refused, but
    /// change nothing. Turn it on only where the API server cannot present a certificate (managed control planes)
    /// and a NetworkPolicy admits only the control plane to the webhook port (chart
    /// `webhook.networkPolicy.enabled`).
    #[arg(long)]
    pub webhook_unverified_may_mark: bool,
    /// What the API reads and the mark of one webhook answer may take together; past it the webhook answers 429 with
    /// a retry hint (the caller retries; nothing is let through) instead of leaving the API server to time out, which
    /// its failurePolicy would decide. Keep it under the configuration's `timeoutSeconds` (the chart passes
    /// `timeoutSeconds` − 1 s).
    #[arg(long, value_name = "DURATION", default_value = "4s", value_parser = parse_duration)]
    pub webhook_answer_within: Duration,
    /// Deletion protection of GameDeployments and HookTemplates without the label
    /// `io.tencent.bcs.dev/deletion-allow`: `Always` (allowed), `Cascading` (allowed once at 0 replicas / not
    /// used by a GameDeployment) or `Deny` (BCS's behaviour).
    #[arg(long, value_name = "POLICY", default_value = "Always")]
    pub deletion_allow_default: DeletionAllow,
    /// After SIGTERM (or SIGINT), how long the replica keeps answering admission while it reports not ready, before
    /// it closes the webhook listener and exits: longer than the cluster takes to withdraw its endpoint from the
    /// webhook Service (kube-proxy and the API server's endpoint view), so no call lands on a closed port. A second
    /// signal ends it at once. The chart's `terminationGracePeriodSeconds` exceeds it. Without `--webhook-address`
    /// there is nothing to drain and the process stops at once.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub shutdown_drain: Duration,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "finding out which user the operator is (SelfSubjectReview): {0}; pass --webhook-operator-user (the operator's \
     ServiceAccount user) so the webhook recognises the operator's own pod deletions"
)]
/// The operator could not learn its own user, so the webhook could not tell its own pod deletions from others' (and
/// would hold them at its own gate): the process does not start, and the message says which flag fixes it.
pub struct IdentityError(String);

impl WebhookFlags {
    /// The server's settings, or `None` when the webhooks are off. Asks the API who the operator is unless
    /// `--webhook-operator-user` says so.
    pub async fn config(&self, client: &Client) -> Result<Option<WebhookConfig>, IdentityError> {
        let Some(address) = self.webhook_address else { return Ok(None) };
        let mut operator_users = self.operator_users.clone();
        if operator_users.is_empty() {
            let reviews: Api<SelfSubjectReview> = Api::all(client.clone());
            let review = reviews
                .create(&PostParams::default(), &SelfSubjectReview::default())
                .await
                .map_err(|e| IdentityError(e.to_string()))?;
            let user = review.status.and_then(|s| s.user_info).and_then(|u| u.username).unwrap_or_default();
            if user.is_empty() {
                return Err(IdentityError("the API returned no username".into()));
            }
            operator_users.push(user);
        }
        tracing::info!(users = ?operator_users, "the pod gate allows pod deletions by these users (the operator)");
        Ok(Some(WebhookConfig {
            address,
            cert: CertFiles::in_dir(&self.webhook_cert_dir),
            gate: GateSettings {
                operator_users,
                privileged_groups: self.privileged_groups.clone(),
                default_deadline: self.pod_gate_deadline,
                max_deadline: self.max_pod_gate_deadline,
                node_lifecycle_users: self.node_lifecycle_users.iter().filter(|u| !u.is_empty()).cloned().collect(),
            },
            deletion_default: self.deletion_allow_default,
            client_ca: self.webhook_client_ca.clone(),
            unverified_may_mark: self.webhook_unverified_may_mark,
            answer_within: self.webhook_answer_within,
        }))
    }
}
