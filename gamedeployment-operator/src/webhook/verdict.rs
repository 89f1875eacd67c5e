//! The admission decisions, as pure functions of what the API server sent and what the API holds (the pod, its
//! GameDeployment, the GameDeployments of a namespace) and the clock. The server (`super::server`) only reads
//! those objects, calls these functions, performs the [`Mark`] they ask for and writes the answer.

use std::time::Duration;

use common::api::GameDeployment;
use common::cached_pod::Pod;
use common::duration::{format_go, parse_go};
use common::keys;
use k8s_openapi::jiff::{SignedDuration, Timestamp, Unit};

use super::{GATE_BYPASS, MARKED_AT, POD_GATE, POD_GATE_DEADLINE, SPECIFIED_DELETE};
use crate::ownership;

/// What is being asked of a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodOperation {
    /// `DELETE pods/NAME` (`kubectl delete pod`, a controller, the garbage collector).
    Delete,
    /// `CREATE pods/NAME/eviction` (`kubectl drain`, the cluster autoscaler, node-pressure tooling).
    Evict,
}

/// Who asks (the request's `userInfo`) and how (`DeleteOptions.gracePeriodSeconds`).
#[derive(Debug, Clone, Copy)]
pub struct PodRequest<'a> {
    pub operation: PodOperation,
    pub username: &'a str,
    pub groups: &'a [String],
    pub grace_period_seconds: Option<i64>,
    /// Whether this request may cause a mark: it came with the API server's verified client certificate, or
    /// unverified callers are allowed to (`--webhook-unverified-may-mark`). Anyone who can reach the webhook port can
    /// send a review, so an unverified one is answered but changes nothing.
    pub may_mark: bool,
}

/// The webhook's settings (flags).
#[derive(Debug, Clone)]
pub struct GateSettings {
    /// Users whose deletions are the operator's own (its ServiceAccount): always allowed, they already passed the
    /// hook gate.
    pub operator_users: Vec<String>,
    /// Members of these groups may skip the gate with `gracePeriodSeconds: 0` (`kubectl delete --grace-period=0
    /// --force`).
    pub privileged_groups: Vec<String>,
    /// How long a marked pod waits for its hook before a deletion is allowed anyway, unless its GameDeployment says
    /// otherwise (annotation [`POD_GATE_DEADLINE`]).
    pub default_deadline: Duration,
    /// The longest deadline any GameDeployment gets (`--max-pod-gate-deadline`): the annotation is a tenant's input,
    /// and an unbounded one would let a tenant block drains and autoscaler scale-down for years.
    pub max_deadline: Duration,
    /// Users of the node lifecycle (the taint-eviction controller of a `NoExecute` taint, the pod garbage collector
    /// of a deleted node): their deletions are let through, with a Warning Event. A failed node's pods serve nobody
    /// and cannot be drained; refusing only delays their replacement.
    pub node_lifecycle_users: Vec<String>,
}

/// The users kube-controller-manager's node lifecycle acts as with `--use-service-account-credentials` (every
/// kubeadm and managed cluster): the taint-eviction controller (Kubernetes 1.29+, a separate controller; it deletes
/// the pods of a node tainted `NoExecute`, e.g. `node.kubernetes.io/unreachable`), the node lifecycle controller
/// that did the same before 1.29, and the pod garbage collector (force-deletes the pods of a deleted or
/// out-of-service node).
pub const NODE_LIFECYCLE_USERS: [&str; 3] = [
    "system:serviceaccount:kube-system:taint-eviction-controller",
    "system:serviceaccount:kube-system:node-controller",
    "system:serviceaccount:kube-system:pod-garbage-collector",
];

/// Why a request was let through (also the `allowed` label of the webhook metric).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allowed {
    PodGone,
    Operator,
    Terminating,
    NotGameDeploymentPod,
    WorkloadGone,
    WorkloadDeleting,
    NotOptedIn,
    NoPreDeleteHook,
    NotRunning,
    Bypass,
    Forced,
    DeadlinePassed,
    NodeLifecycle,
}

impl Allowed {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::PodGone => "pod_gone",
            Self::Operator => "operator",
            Self::Terminating => "terminating",
            Self::NotGameDeploymentPod => "not_gamedeployment_pod",
            Self::WorkloadGone => "workload_gone",
            Self::WorkloadDeleting => "workload_deleting",
            Self::NotOptedIn => "not_opted_in",
            Self::NoPreDeleteHook => "no_pre_delete_hook",
            Self::NotRunning => "not_running",
            Self::Bypass => "bypass",
            Self::Forced => "forced",
            Self::DeadlinePassed => "deadline_passed",
            Self::NodeLifecycle => "node_lifecycle",
        }
    }
}

/// What the webhook writes on the pod before it refuses: the label that hands the pod to the operator's
/// specified-delete path, and when the pod was first marked (the deadline counts from there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// `apps.kruise.io/specified-delete` is not `"true"` yet.
    pub label: bool,
    /// The annotation [`MARKED_AT`] to write (absent or unreadable on the pod), else `None`.
    pub marked_at: Option<Timestamp>,
}

impl Mark {
    pub fn is_empty(&self) -> bool {
        !self.label && self.marked_at.is_none()
    }
}

/// A refusal: the HTTP code the requester sees (429 for evictions, which `kubectl drain` and the cluster autoscaler
/// retry; 403 for deletes), the message, and the mark to write first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: u16,
    pub message: String,
    pub mark: Mark,
    /// A mark was due but the request may not cause it ([`PodRequest::may_mark`]); `mark` is then empty.
    pub withheld: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodVerdict {
    Allow(Allowed),
    Refuse(Refusal),
}

/// Whether a GameDeployment opted in to the pod gate (annotation [`POD_GATE`] = `"true"`).
pub fn opted_in(gd: &GameDeployment) -> bool {
    gd.metadata.annotations.as_ref().and_then(|a| a.get(POD_GATE)).is_some_and(|v| v == "true")
}

/// The deadline of a GameDeployment's marked pods, and what the answer says about how it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deadline {
    pub duration: Duration,
    /// An unreadable annotation (the default applies), or the cap that applied.
    pub note: Option<String>,
}

/// The GameDeployment's deadline (annotation [`POD_GATE_DEADLINE`], a Go duration), else the default, capped at
/// [`GateSettings::max_deadline`]; an unreadable value falls back to the default and says so, and so does a cap.
pub fn deadline(gd: &GameDeployment, settings: &GateSettings) -> Deadline {
    let (asked, what, mut note) = match gd.metadata.annotations.as_ref().and_then(|a| a.get(POD_GATE_DEADLINE)) {
        None => (settings.default_deadline, "the default deadline".to_string(), None),
        Some(value) => match parse_go(value) {
            Ok(d) => (d, format!("annotation {POD_GATE_DEADLINE}"), None),
            Err(e) => (
                settings.default_deadline,
                "the default deadline".to_string(),
                Some(format!("annotation {POD_GATE_DEADLINE} ignored: {e}")),
            ),
        },
    };
    if asked <= settings.max_deadline {
        return Deadline { duration: asked, note };
    }
    let cap = format!(
        "{what} {} is capped at {} by the operator's --max-pod-gate-deadline",
        format_go(asked),
        format_go(settings.max_deadline)
    );
    note = Some(match note {
        Some(problem) => format!("{problem}; {cap}"),
        None => cap,
    });
    Deadline { duration: settings.max_deadline, note }
}

fn pod_annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The pod gate: may this DELETE or eviction of `pod` happen now? `gd` is the GameDeployment named by the pod's
/// controller ownerReference as the API returned it (`None`: not found).
pub fn pod_gate(
    request: &PodRequest<'_>,
    pod: Option<&Pod>,
    gd: Option<&GameDeployment>,
    settings: &GateSettings,
    now: Timestamp,
) -> PodVerdict {
    let Some(pod) = pod else { return PodVerdict::Allow(Allowed::PodGone) };
    if settings.operator_users.iter().any(|u| u == request.username) {
        return PodVerdict::Allow(Allowed::Operator);
    }
    if common::pod::is_terminating(pod) {
        return PodVerdict::Allow(Allowed::Terminating);
    }
    let Some(owner) = ownership::controller_of(pod.metadata.owner_references.as_ref())
        .filter(|o| o.kind == "GameDeployment" && o.api_version.starts_with("tkex.tencent.com/"))
    else {
        return PodVerdict::Allow(Allowed::NotGameDeploymentPod);
    };
    let Some(gd) = gd.filter(|gd| gd.metadata.uid.as_deref() == Some(owner.uid.as_str())) else {
        return PodVerdict::Allow(Allowed::WorkloadGone);
    };
    if gd.metadata.deletion_timestamp.is_some() {
        return PodVerdict::Allow(Allowed::WorkloadDeleting);
    }
    if !opted_in(gd) {
        return PodVerdict::Allow(Allowed::NotOptedIn);
    }
    let Some(template) = gd.spec.pre_delete_update_strategy.as_ref().and_then(|s| s.hook.as_ref()) else {
        return PodVerdict::Allow(Allowed::NoPreDeleteHook);
    };
    // The operator deletes a pod that is not Running without a hook (it serves nobody), so may anyone else.
    if !common::pod::is_running(pod) {
        return PodVerdict::Allow(Allowed::NotRunning);
    }
    // The node is failed (NoExecute taint) or gone: the pod cannot drain, and its replacement waits for it.
    if settings.node_lifecycle_users.iter().any(|u| u == request.username) {
        return PodVerdict::Allow(Allowed::NodeLifecycle);
    }
    if pod_annotation(pod, GATE_BYPASS) == Some("true") {
        return PodVerdict::Allow(Allowed::Bypass);
    }
    if request.grace_period_seconds == Some(0) && request.groups.iter().any(|g| settings.privileged_groups.contains(g))
    {
        return PodVerdict::Allow(Allowed::Forced);
    }
    let Deadline { duration: deadline, note: deadline_note } = deadline(gd, settings);
    // The mark time counts only while the mark it dates is there: a request cancelled by removing the label (the
    // pod back to Normal) leaves no deadline running, and the next refused request starts a new one.
    let labelled = common::pod::label(pod, SPECIFIED_DELETE) == Some("true");
    let marked_at = pod_annotation(pod, MARKED_AT).and_then(|v| v.parse::<Timestamp>().ok()).filter(|_| labelled);
    let since = marked_at.unwrap_or(now);
    let release = SignedDuration::try_from(deadline).ok().and_then(|d| since.checked_add(d).ok());
    if marked_at.is_some() && release.is_some_and(|r| r <= now) {
        return PodVerdict::Allow(Allowed::DeadlinePassed);
    }
    let due = Mark { label: !labelled, marked_at: marked_at.is_none().then_some(now) };
    let withheld = !request.may_mark && !due.is_empty();
    let mark = if withheld { Mark { label: false, marked_at: None } } else { due };

    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    // The pod as the hints' commands name it (`-n` outside the default namespace).
    let pod_target = common::hint::target(pod_name, pod.metadata.namespace.as_deref());
    let gd_name = gd.metadata.name.as_deref().unwrap_or_default();
    let state = common::pod::label(pod, keys::LIFECYCLE_STATE).unwrap_or("Normal");
    let what = match request.operation {
        PodOperation::Delete => "deleted",
        PodOperation::Evict => "evicted",
    };
    let waiting = if withheld {
        format!(
            "it is NOT marked for deletion: this request did not come with the API server's verified client \
             certificate, and unverified callers cannot mark pods. To delete it through its hook, mark it yourself \
             (kubectl label pod {pod_target} {SPECIFIED_DELETE}=true)"
        )
    } else if state == "PreparingDelete" {
        format!("it is marked for deletion ({SPECIFIED_DELETE}=true) and waits in PreparingDelete for that hook")
    } else {
        format!("it is now marked for deletion ({SPECIFIED_DELETE}=true)")
    };
    // Unmarked (withheld), no deadline runs: it starts when someone marks the pod.
    let release = release.filter(|_| !withheld).map_or_else(String::new, |r| {
        format!(
            " If the hook has not let it go by {} ({} after it was marked), it is released anyway.",
            r.round(Unit::Second).unwrap_or(r),
            format_go(deadline)
        )
    });
    let mut message = format!(
        "pod {pod_name} is a game server of GameDeployment {gd_name}, which gates pod deletions on its pre-delete hook \
         (HookTemplate {template}): it cannot be {what} directly. Instead {waiting}: the \
         operator deletes it once a HookRun of that hook is Successful and creates its replacement.{release} To \
         skip the hook: kubectl annotate pod {pod_target} {GATE_BYPASS}=true, then retry.",
        template = template.template_name,
    );
    if request.operation == PodOperation::Evict {
        message.push_str(" Retry the eviction later (kubectl drain retries by itself).");
    }
    if let Some(note) = deadline_note {
        message.push_str(&format!(" ({note})"));
    }
    let code = match request.operation {
        PodOperation::Delete => 403,
        PodOperation::Evict => 429,
    };
    PodVerdict::Refuse(Refusal { code, message, mark, withheld })
}

/// BCS's deletion protection setting: the label `io.tencent.bcs.dev/deletion-allow`, or the default for objects
/// without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletionAllow {
    /// Deletion allowed.
    Always,
    /// Allowed once nothing depends on the object: a GameDeployment at 0 replicas, a HookTemplate no GameDeployment
    /// of its namespace names.
    Cascading,
    /// Refused until the label says `Always` (BCS's behaviour for unlabelled objects).
    Deny,
}

impl std::str::FromStr for DeletionAllow {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "Always" => Ok(Self::Always),
            "Cascading" => Ok(Self::Cascading),
            "Deny" => Ok(Self::Deny),
            other => Err(format!("{other:?} is not one of Always, Cascading, Deny")),
        }
    }
}

/// The object whose deletion is asked, with what `Cascading` looks at.
#[derive(Debug, Clone, Copy)]
pub enum Protected<'a> {
    /// `spec.replicas` (BCS: absent counts as 0).
    GameDeployment { replicas: Option<i32> },
    /// Names of the GameDeployments of the template's namespace that name it in a hook (not being deleted).
    HookTemplate { used_by: &'a [String] },
}

/// BCS's deletion protection, with BCS's messages: `Always` allows, `Cascading` refuses while something depends
/// on the object, any other value refuses; an object without the label gets `default`.
pub fn deletion_protection(label: Option<&str>, default: DeletionAllow, object: Protected<'_>) -> Result<(), String> {
    let policy = match label {
        None => default,
        Some("Always") => DeletionAllow::Always,
        Some("Cascading") => DeletionAllow::Cascading,
        Some(_) => DeletionAllow::Deny,
    };
    let key = keys::DELETION_ALLOW;
    match policy {
        DeletionAllow::Always => Ok(()),
        DeletionAllow::Deny => {
            Err(format!("forbidden by ResourceDeletionAllow, set labels {key}=Always to allow operation"))
        }
        DeletionAllow::Cascading => match object {
            Protected::GameDeployment { replicas: Some(replicas) } if replicas > 0 => {
                Err(format!("forbidden by ResourceDeletionAllow for {key}=Cascading and replicas {replicas}>0"))
            }
            Protected::GameDeployment { .. } => Ok(()),
            Protected::HookTemplate { used_by } if !used_by.is_empty() => Err(format!(
                "forbidden by ResourceDeletionAllow for {key}=Cascading and referencing GameDeployments {}>0 ({})",
                used_by.len(),
                used_by.join(", ")
            )),
            Protected::HookTemplate { .. } => Ok(()),
        },
    }
}

/// Whether a GameDeployment names HookTemplate `template` in any hook (pre-delete, pre-inplace, post-inplace, a
/// canary step) or as its scale-in cost probe.
pub fn uses_template(gd: &GameDeployment, template: &str) -> bool {
    gd.spec.hook_template_names().any(|name| name == template)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{self, GD_UID, ts};
    use serde_json::json;

    const HOUR: Duration = Duration::from_secs(3600);

    fn settings() -> GateSettings {
        GateSettings {
            operator_users: vec!["system:serviceaccount:ops:gd".into()],
            privileged_groups: vec!["system:masters".into()],
            default_deadline: HOUR,
            max_deadline: 24 * HOUR,
            node_lifecycle_users: NODE_LIFECYCLE_USERS.iter().map(|u| u.to_string()).collect(),
        }
    }

    /// `game`, opted in, with a pre-delete hook on template `drain`.
    fn gated_gd() -> GameDeployment {
        let mut gd = fixtures::gd(3, "RollingUpdate");
        gd.metadata.annotations = Some([(POD_GATE.to_string(), "true".to_string())].into());
        gd.spec.pre_delete_update_strategy =
            serde_json::from_value(json!({"hook": {"templateName": "drain"}})).expect("strategy");
        gd
    }

    fn running_pod() -> fixtures::PodBuilder {
        fixtures::pod("game-abcde").owned_by(GD_UID).phase("Running").labels(&[(POD_GATE, "true")])
    }

    fn delete_by<'a>(username: &'a str, groups: &'a [String]) -> PodRequest<'a> {
        PodRequest { operation: PodOperation::Delete, username, groups, grace_period_seconds: None, may_mark: true }
    }

    const NOW: i64 = 10_000;

    fn decide(request: &PodRequest<'_>, pod: &Pod, gd: &GameDeployment) -> PodVerdict {
        pod_gate(request, Some(pod), Some(gd), &settings(), ts(NOW))
    }

    fn refusal(verdict: PodVerdict) -> Refusal {
        match verdict {
            PodVerdict::Refuse(r) => r,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_user_delete_of_a_gated_running_pod_is_refused_and_marks_it() {
        let groups = vec!["system:authenticated".to_string()];
        let r = refusal(decide(&delete_by("alice", &groups), &running_pod().build(), &gated_gd()));
        assert_eq!(r.code, 403);
        assert_eq!(r.mark, Mark { label: true, marked_at: Some(ts(NOW)) });
        for needle in [
            "pod game-abcde",
            "GameDeployment game",
            "HookTemplate drain",
            "it is now marked for deletion (apps.kruise.io/specified-delete=true)",
            "deletes it once a HookRun of that hook is Successful and creates its replacement",
            "1h0m0s after it was marked",
            "kubectl annotate pod game-abcde gamedeployment.tkex.tencent.com/gate-bypass=true",
        ] {
            assert!(r.message.contains(needle), "{needle:?} missing in {}", r.message);
        }
    }

    #[test]
    fn an_eviction_is_answered_429_so_drain_and_the_autoscaler_retry() {
        let groups = vec![];
        let request = PodRequest {
            operation: PodOperation::Evict,
            ..delete_by("system:serviceaccount:kube-system:drainer", &groups)
        };
        let r = refusal(decide(&request, &running_pod().build(), &gated_gd()));
        assert_eq!(r.code, 429);
        assert!(r.message.contains("cannot be evicted directly"), "{}", r.message);
        assert!(r.message.contains("Retry the eviction later"), "{}", r.message);
    }

    #[test]
    fn a_marked_pod_is_not_marked_again_and_its_mark_time_is_kept() {
        let pod = running_pod()
            .labels(&[(POD_GATE, "true"), (SPECIFIED_DELETE, "true"), (keys::LIFECYCLE_STATE, "PreparingDelete")])
            .annotation(MARKED_AT, &ts(NOW - 60).to_string())
            .build();
        let r = refusal(decide(&delete_by("alice", &[]), &pod, &gated_gd()));
        assert!(r.mark.is_empty(), "{:?}", r.mark);
        assert!(
            r.message.contains("(apps.kruise.io/specified-delete=true) and waits in PreparingDelete for that hook"),
            "{}",
            r.message
        );
        assert!(r.message.contains(&ts(NOW - 60 + 3600).to_string()), "release time in {}", r.message);
    }

    #[test]
    fn the_deadline_releases_the_pod_counting_from_the_first_mark() {
        let marked = |seconds_ago: i64| {
            running_pod()
                .labels(&[(POD_GATE, "true"), (SPECIFIED_DELETE, "true")])
                .annotation(MARKED_AT, &ts(NOW - seconds_ago).to_string())
                .build()
        };
        assert_eq!(
            decide(&delete_by("alice", &[]), &marked(3600), &gated_gd()),
            PodVerdict::Allow(Allowed::DeadlinePassed)
        );
        assert!(matches!(decide(&delete_by("alice", &[]), &marked(3599), &gated_gd()), PodVerdict::Refuse(_)));
        // The GameDeployment's own deadline wins over the default.
        let mut gd = gated_gd();
        gd.metadata.annotations.get_or_insert_with(Default::default).insert(POD_GATE_DEADLINE.into(), "10m".into());
        assert_eq!(decide(&delete_by("alice", &[]), &marked(600), &gd), PodVerdict::Allow(Allowed::DeadlinePassed));
        let r = refusal(decide(&delete_by("alice", &[]), &marked(599), &gd));
        assert!(r.message.contains("10m0s after it was marked"), "{}", r.message);
        // An unreadable deadline falls back to the default and says so.
        gd.metadata.annotations.get_or_insert_with(Default::default).insert(POD_GATE_DEADLINE.into(), "soon".into());
        let r = refusal(decide(&delete_by("alice", &[]), &marked(600), &gd));
        assert!(
            r.message.contains("annotation gamedeployment.tkex.tencent.com/pod-gate-deadline ignored"),
            "{}",
            r.message
        );
        // An unreadable mark time is replaced (the deadline starts now), never read as "long ago".
        let pod = running_pod().annotation(MARKED_AT, "yesterday").build();
        assert_eq!(refusal(decide(&delete_by("alice", &[]), &pod, &gated_gd())).mark.marked_at, Some(ts(NOW)));
    }

    #[test]
    fn a_cancelled_mark_does_not_count_and_a_new_refusal_starts_a_new_deadline() {
        // Refused and marked two hours ago; the user then removed the label (the pod went back to Normal) but the
        // mark time stayed. It dates a request that no longer exists: the deadline does not count from it.
        let cancelled = running_pod().annotation(MARKED_AT, &ts(NOW - 7200).to_string()).build();
        let r = refusal(decide(&delete_by("alice", &[]), &cancelled, &gated_gd()));
        assert_eq!(r.mark, Mark { label: true, marked_at: Some(ts(NOW)) }, "a new mark, a new deadline");
        assert!(r.message.contains(&ts(NOW + 3600).to_string()), "released an hour from now: {}", r.message);
        // The same pod still marked: the old deadline passed, the delete is allowed.
        let still_marked = running_pod()
            .labels(&[(POD_GATE, "true"), (SPECIFIED_DELETE, "true")])
            .annotation(MARKED_AT, &ts(NOW - 7200).to_string())
            .build();
        assert_eq!(
            decide(&delete_by("alice", &[]), &still_marked, &gated_gd()),
            PodVerdict::Allow(Allowed::DeadlinePassed)
        );
        // A label set to something else than "true" is no mark either.
        let other = running_pod()
            .labels(&[(POD_GATE, "true"), (SPECIFIED_DELETE, "false")])
            .annotation(MARKED_AT, &ts(NOW - 7200).to_string())
            .build();
        assert_eq!(refusal(decide(&delete_by("alice", &[]), &other, &gated_gd())).mark.marked_at, Some(ts(NOW)));
    }

    #[test]
    fn the_deadline_is_capped_by_the_operator_and_the_answer_names_the_cap() {
        let marked = |seconds_ago: i64| {
            running_pod()
                .labels(&[(POD_GATE, "true"), (SPECIFIED_DELETE, "true")])
                .annotation(MARKED_AT, &ts(NOW - seconds_ago).to_string())
                .build()
        };
        let mut gd = gated_gd();
        gd.metadata.annotations.get_or_insert_with(Default::default).insert(POD_GATE_DEADLINE.into(), "720h".into());
        assert_eq!(
            deadline(&gd, &settings()),
            Deadline {
                duration: 24 * HOUR,
                note: Some(
                    "annotation gamedeployment.tkex.tencent.com/pod-gate-deadline 720h0m0s is capped at 24h0m0s by \
                     the operator's --max-pod-gate-deadline"
                        .into()
                ),
            }
        );
        let r = refusal(decide(&delete_by("alice", &[]), &marked(24 * 3600 - 1), &gd));
        assert!(r.message.contains("24h0m0s after it was marked"), "{}", r.message);
        assert!(r.message.contains("capped at 24h0m0s by the operator's --max-pod-gate-deadline"), "{}", r.message);
        assert_eq!(
            decide(&delete_by("alice", &[]), &marked(24 * 3600), &gd),
            PodVerdict::Allow(Allowed::DeadlinePassed)
        );
        // Below the cap nothing changes and nothing is said.
        gd.metadata.annotations.get_or_insert_with(Default::default).insert(POD_GATE_DEADLINE.into(), "24h".into());
        assert_eq!(deadline(&gd, &settings()), Deadline { duration: 24 * HOUR, note: None });
        // The operator's own default is capped too (a --pod-gate-deadline above --max-pod-gate-deadline).
        let generous = GateSettings { default_deadline: 48 * HOUR, ..settings() };
        let d = deadline(&gated_gd(), &generous);
        assert_eq!(d.duration, 24 * HOUR);
        assert_eq!(
            d.note.as_deref(),
            Some("the default deadline 48h0m0s is capped at 24h0m0s by the operator's --max-pod-gate-deadline")
        );
    }

    #[test]
    fn the_node_lifecycle_is_let_through_and_nobody_else_with_its_groups() {
        // The taint-eviction controller deletes the pods of a node tainted NoExecute (a DELETE, not an eviction);
        // the node lifecycle controller did before Kubernetes 1.29; the pod GC force-deletes a deleted node's pods.
        let groups = vec!["system:serviceaccounts".to_string(), "system:serviceaccounts:kube-system".to_string()];
        for user in NODE_LIFECYCLE_USERS {
            for operation in [PodOperation::Delete, PodOperation::Evict] {
                let request = PodRequest { operation, ..delete_by(user, &groups) };
                assert_eq!(
                    decide(&request, &running_pod().build(), &gated_gd()),
                    PodVerdict::Allow(Allowed::NodeLifecycle),
                    "{user} {operation:?}"
                );
            }
        }
        // Another kube-system controller (the ReplicaSet controller, say), or a user in the same groups: refused.
        let other = delete_by("system:serviceaccount:kube-system:replicaset-controller", &groups);
        assert!(matches!(decide(&other, &running_pod().build(), &gated_gd()), PodVerdict::Refuse(_)));
        // Only gated pods are ever worth a warning: a pod nobody gates is allowed for its own reason.
        let request = delete_by(NODE_LIFECYCLE_USERS[0], &groups);
        let pending = running_pod().phase("Pending").build();
        assert_eq!(decide(&request, &pending, &gated_gd()), PodVerdict::Allow(Allowed::NotRunning));
        // With the list emptied (--pod-gate-node-lifecycle-user ''), the node lifecycle is gated like anyone.
        let strict = GateSettings { node_lifecycle_users: vec![], ..settings() };
        let verdict = pod_gate(&request, Some(&running_pod().build()), Some(&gated_gd()), &strict, ts(NOW));
        assert!(matches!(verdict, PodVerdict::Refuse(_)), "{verdict:?}");
    }

    #[test]
    fn an_unverified_request_is_answered_but_marks_nothing() {
        let unverified = PodRequest { may_mark: false, ..delete_by("mallory", &[]) };
        let r = refusal(decide(&unverified, &running_pod().build(), &gated_gd()));
        assert_eq!(r.code, 403, "refused like any other caller");
        assert!(r.withheld);
        assert!(r.mark.is_empty(), "{:?}", r.mark);
        for needle in [
            "it is NOT marked for deletion: this request did not come with the API server's verified client certificate",
            "kubectl label pod game-abcde apps.kruise.io/specified-delete=true",
        ] {
            assert!(r.message.contains(needle), "{needle:?} in {}", r.message);
        }
        assert!(!r.message.contains("now marked"), "{}", r.message);
        assert!(!r.message.contains("released anyway"), "no deadline runs for an unmarked pod: {}", r.message);
        // Nothing was due (already marked): nothing withheld, the usual answer.
        let marked = running_pod()
            .labels(&[(POD_GATE, "true"), (SPECIFIED_DELETE, "true")])
            .annotation(MARKED_AT, &ts(NOW - 60).to_string())
            .build();
        let r = refusal(decide(&unverified, &marked, &gated_gd()));
        assert!(!r.withheld && r.mark.is_empty(), "{r:?}");
        assert!(r.message.contains("marked for deletion (apps.kruise.io/specified-delete=true)"), "{}", r.message);
        // What lets a request through does not depend on who sent it (nothing is written either way).
        let bypassed = running_pod().annotation(GATE_BYPASS, "true").build();
        assert_eq!(decide(&unverified, &bypassed, &gated_gd()), PodVerdict::Allow(Allowed::Bypass));
    }

    #[test]
    fn the_operator_itself_and_pods_already_going_are_allowed() {
        let pod = running_pod().build();
        assert_eq!(
            decide(&delete_by("system:serviceaccount:ops:gd", &[]), &pod, &gated_gd()),
            PodVerdict::Allow(Allowed::Operator)
        );
        // The kubelet's final delete and a second `kubectl delete` of a terminating pod.
        let terminating = running_pod().terminating().build();
        assert_eq!(
            decide(&delete_by("system:node:n1", &[]), &terminating, &gated_gd()),
            PodVerdict::Allow(Allowed::Terminating)
        );
        assert_eq!(
            pod_gate(&delete_by("alice", &[]), None, Some(&gated_gd()), &settings(), ts(NOW)),
            PodVerdict::Allow(Allowed::PodGone)
        );
    }

    #[test]
    fn pods_nobody_gates_are_allowed() {
        let alice = delete_by("alice", &[]);
        let pod = running_pod().build();
        // Not a GameDeployment's pod.
        let plain = fixtures::pod("web-1").phase("Running").build();
        assert_eq!(decide(&alice, &plain, &gated_gd()), PodVerdict::Allow(Allowed::NotGameDeploymentPod));
        // Its GameDeployment is gone (garbage collection after `kubectl delete gd`), or is another object now.
        assert_eq!(pod_gate(&alice, Some(&pod), None, &settings(), ts(NOW)), PodVerdict::Allow(Allowed::WorkloadGone));
        let mut other = gated_gd();
        other.metadata.uid = Some("another-uid".into());
        assert_eq!(decide(&alice, &pod, &other), PodVerdict::Allow(Allowed::WorkloadGone));
        // Its GameDeployment is being deleted (foreground deletion deletes the pods).
        let mut deleting = gated_gd();
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts(1)));
        assert_eq!(decide(&alice, &pod, &deleting), PodVerdict::Allow(Allowed::WorkloadDeleting));
        // Not opted in (annotation absent or not "true").
        let mut not_opted = gated_gd();
        not_opted.metadata.annotations = Some([(POD_GATE.to_string(), "yes".to_string())].into());
        assert_eq!(decide(&alice, &pod, &not_opted), PodVerdict::Allow(Allowed::NotOptedIn));
        // No pre-delete hook: nothing to wait for.
        let mut no_hook = gated_gd();
        no_hook.spec.pre_delete_update_strategy = None;
        assert_eq!(decide(&alice, &pod, &no_hook), PodVerdict::Allow(Allowed::NoPreDeleteHook));
        // Not Running: the operator itself would delete it without a hook.
        let pending = running_pod().phase("Pending").build();
        assert_eq!(decide(&alice, &pending, &gated_gd()), PodVerdict::Allow(Allowed::NotRunning));
    }

    #[test]
    fn the_escape_hatches() {
        let bypassed = running_pod().annotation(GATE_BYPASS, "true").build();
        assert_eq!(decide(&delete_by("alice", &[]), &bypassed, &gated_gd()), PodVerdict::Allow(Allowed::Bypass));
        // --grace-period=0 --force by a member of a privileged group.
        let masters = vec!["system:masters".to_string()];
        let forced = PodRequest { grace_period_seconds: Some(0), ..delete_by("admin", &masters) };
        assert_eq!(decide(&forced, &running_pod().build(), &gated_gd()), PodVerdict::Allow(Allowed::Forced));
        // Not by anyone else, and not without grace period 0.
        let devs = vec!["devs".to_string()];
        let forced_by_dev = PodRequest { grace_period_seconds: Some(0), ..delete_by("bob", &devs) };
        assert!(matches!(decide(&forced_by_dev, &running_pod().build(), &gated_gd()), PodVerdict::Refuse(_)));
        let admin_graceful = PodRequest { grace_period_seconds: Some(30), ..delete_by("admin", &masters) };
        assert!(matches!(decide(&admin_graceful, &running_pod().build(), &gated_gd()), PodVerdict::Refuse(_)));
    }

    #[test]
    fn deletion_protection_follows_bcs_with_a_configurable_default() {
        use DeletionAllow::*;
        let gd = |replicas| Protected::GameDeployment { replicas: Some(replicas) };
        assert_eq!(deletion_protection(Some("Always"), Deny, gd(3)), Ok(()));
        assert_eq!(
            deletion_protection(Some("Cascading"), Always, gd(3)),
            Err("forbidden by ResourceDeletionAllow for io.tencent.bcs.dev/deletion-allow=Cascading and replicas 3>0"
                .into())
        );
        assert_eq!(deletion_protection(Some("Cascading"), Deny, gd(0)), Ok(()));
        assert_eq!(deletion_protection(Some("Cascading"), Deny, Protected::GameDeployment { replicas: None }), Ok(()));
        let bcs = "forbidden by ResourceDeletionAllow, set labels io.tencent.bcs.dev/deletion-allow=Always to allow operation";
        // An explicit other value refuses, as in BCS.
        assert_eq!(deletion_protection(Some("always"), Always, gd(0)), Err(bcs.into()));
        // Without the label the default decides: Always (the chart's default), Deny (BCS), or Cascading.
        assert_eq!(deletion_protection(None, Always, gd(3)), Ok(()));
        assert_eq!(deletion_protection(None, Deny, gd(0)), Err(bcs.into()));
        assert!(deletion_protection(None, Cascading, gd(1)).is_err());
        // HookTemplates: Cascading works (BCS refused it, and crashed for other kinds).
        let users = vec!["web".to_string(), "lobby".to_string()];
        assert_eq!(
            deletion_protection(Some("Cascading"), Always, Protected::HookTemplate { used_by: &users }),
            Err("forbidden by ResourceDeletionAllow for io.tencent.bcs.dev/deletion-allow=Cascading and referencing \
                 GameDeployments 2>0 (web, lobby)"
                .into())
        );
        assert_eq!(deletion_protection(Some("Cascading"), Deny, Protected::HookTemplate { used_by: &[] }), Ok(()));
        assert_eq!(deletion_protection(None, Deny, Protected::HookTemplate { used_by: &[] }), Err(bcs.into()));
        assert_eq!("Cascading".parse::<DeletionAllow>(), Ok(Cascading));
        assert!("never".parse::<DeletionAllow>().is_err());
    }

    #[test]
    fn a_template_is_used_by_any_hook_of_a_gamedeployment() {
        let mut gd = fixtures::gd(1, "InplaceUpdate");
        assert!(!uses_template(&gd, "drain"));
        gd.spec.post_inplace_update_strategy =
            serde_json::from_value(json!({"hook": {"templateName": "warm"}})).unwrap();
        assert!(uses_template(&gd, "warm"));
        gd.spec.update_strategy.canary =
            serde_json::from_value(json!({"steps": [{"partition": 1}, {"hook": {"templateName": "canary"}}]})).unwrap();
        assert!(uses_template(&gd, "canary"));
        assert!(!uses_template(&gd, "drain"));
        gd.spec.scale_strategy = serde_json::from_value(
            json!({"scaleInPolicy": {"mode": "RaceToEmpty", "costProbe": {"templateName": "players"}}}),
        )
        .unwrap();
        assert!(uses_template(&gd, "players"));
    }
}
