//! The plan under construction: actions, events, held pods, the set of pods already acted on this pass (so none
//! is acted on twice) and the earliest time to look again.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::settings::{PodInfo, Settings};
use crate::action::{Action, HeldPod, PatchReason, PlannedEvent, PodChange, PodWrite};
use crate::gate::GateDecision;
use crate::gate::{self, GateKind, GateRequest};
use crate::lifecycle::{self, Handler};
use crate::patch;
use common::keys;
use serde_json::json;

#[derive(Debug, Default)]
pub(crate) struct Draft {
    pub actions: Vec<Action>,
    pub events: Vec<PlannedEvent>,
    pub held: Vec<HeldPod>,
    /// Names of the `held` pods ([`Self::is_held`] is asked for every pod in a pass).
    held_names: BTreeSet<String>,
    /// Hook runs that let a pod through this pass (kept until the pod has moved on).
    pub passed_runs: BTreeSet<String>,
    /// Pods whose post-inplace hook has not succeeded yet (`status.postInplaceHookCondition`).
    pub post_hooks: Vec<common::api::HookCondition>,
    /// Pods a pre-delete / pre-inplace gate let go without a successful hook this pass (`hookPolicy`, a skip), as
    /// their condition entries (`releasedBy` set).
    pub released: Vec<(common::hookrun::HookKind, common::api::HookCondition)>,
    /// Pods this pass's update batch moves, in the order chosen (for the `Progressing` message: their next state is
    /// not observed yet).
    pub batch: Vec<String>,
    touched: BTreeSet<String>,
    requeue: Option<Duration>,
}

impl Draft {
    /// Claims a pod for this pass; false if something already acted on it.
    pub fn touch(&mut self, name: &str) -> bool {
        self.touched.insert(name.to_string())
    }

    pub fn is_touched(&self, name: &str) -> bool {
        self.touched.contains(name)
    }

    pub fn is_held(&self, name: &str) -> bool {
        self.held_names.contains(name)
    }

    /// Look again at `at` (if it is in the future; otherwise soon).
    pub fn requeue_at(&mut self, now: Timestamp, at: Timestamp) {
        let secs = (at.as_second() - now.as_second()).max(1);
        let after = Duration::from_secs(u64::try_from(secs).unwrap_or(1));
        self.requeue = Some(self.requeue.map_or(after, |r| r.min(after)));
    }

    /// Reports runs stamped for the pod's attempt whose signature does not verify (see [`crate::gate::attempt::Judgement`]):
    /// ignored by the gate, never a success, never counted as a retry.
    pub fn forged_runs(
        &mut self,
        info: &PodInfo<'_>,
        kind: common::hookrun::HookKind,
        decides: &str,
        forged: &[(String, String)],
    ) {
        let forged: Vec<String> = forged.iter().map(|(n, why)| format!("{n} ({why})")).collect();
        self.events.push(
            PlannedEvent::warning(
                "ForgedHookRun",
                format!(
                    "pod {}: HookRun(s) {} claim its {} hook but were not made by this operator; ignored (never a \
                     success, never a retry), HookRun {} decides",
                    info.name,
                    forged.join(", "),
                    kind.type_label(),
                    decides
                ),
            )
            .about_pod(&info.pod_ref()),
        );
    }

    /// Puts a pod change to the gate. On `Allow` the caller acts; otherwise the pod is held: it is moved to
    /// `PreparingDelete` / `PreparingUpdate` (if it is not there yet) and recorded with the reason.
    pub fn pass_gate(&mut self, settings: &Settings<'_>, info: &PodInfo<'_>, kind: GateKind) -> bool {
        self.pass_gate_with(settings, info, kind, &[])
    }

    /// [`Self::pass_gate`] for an in-place update that changes the `modified` containers (pre-inplace hook args).
    /// A run the gate asks for is created by an action of this plan.
    pub fn pass_gate_with(
        &mut self,
        settings: &Settings<'_>,
        info: &PodInfo<'_>,
        kind: GateKind,
        modified: &[String],
    ) -> bool {
        let target = matches!(kind, GateKind::InPlaceUpdate | GateKind::HotPatchUpdate)
            .then_some(settings.update_revision.as_str());
        let request = GateRequest { kind, pod: info.pod, pod_revision: info.revision, target_revision: target };
        let mut verdict = gate::verdict(&request, &settings.gate, modified);
        if let Some(hook) = verdict.hook.as_ref()
            && hook.create.is_none()
            && !hook.foreign.is_empty()
        {
            self.forged_runs(info, hook.kind, &hook.run_name, &hook.foreign);
        }
        let decision = verdict.decision;
        if let Some(at) = verdict.hook.as_ref().and_then(|h| h.recheck_at) {
            self.requeue_at(settings.now, at);
        }
        // The CloneSet lifecycle handler of this change (`spec.lifecycle`): checked together with the hook, so the
        // pod enters its Preparing state once and the HookRun and the outside controller work concurrently.
        let which = match kind {
            GateKind::Delete(_) => Some(Handler::PreDelete),
            GateKind::InPlaceUpdate => Some(Handler::InPlaceUpdate),
            GateKind::HotPatchUpdate => None,
        };
        let handler_hold = which.and_then(|w| lifecycle::holds_release(settings.gd, w, info.pod));
        if decision.is_allow() && handler_hold.is_none() {
            if let Some(hook) = verdict.hook {
                // A release without a successful hook, as the GameDeployment's status records it.
                let release = |reason: common::api::HookReleaseReason, message: &str| {
                    let condition = common::api::HookCondition {
                        pod_name: info.name.to_string(),
                        start_time: hook.started.clone(),
                        phase: hook.phase,
                        hook_run: Some(hook.run_name.clone()),
                        message: Some(message.to_string()),
                        released_by: Some(reason),
                        released_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(settings.now)),
                    };
                    (hook.kind, condition)
                };
                if let Some((reason, message)) = &hook.released {
                    self.released.push(release(*reason, message));
                }
                if hook.terminated {
                    let by = hook.terminated_by.as_deref().map(|m| format!(" ({m})")).unwrap_or_default();
                    let message = format!(
                        "pod {}: released because HookRun {} was terminated (spec.terminate: true){by}, not because its \
                         hook succeeded",
                        info.name, hook.run_name
                    );
                    // Recorded in the GameDeployment's status like every release without a successful hook.
                    self.released.push(release(common::api::HookReleaseReason::Terminated, &message));
                    self.events.push(PlannedEvent::warning("HookRunTerminated", message).about_pod(&info.pod_ref()));
                }
                self.passed_runs.insert(hook.run_name);
            }
            return true;
        }
        let run_created = verdict.hook.as_ref().is_some_and(|h| h.create.is_some());
        // Moved, not copied: a scale-in of thousands of hooked pods plans a run for each in one pass.
        if let Some(hook) = verdict.hook.as_mut()
            && let Some(run) = hook.create.take()
        {
            if !hook.foreign.is_empty() {
                let skipped: Vec<String> = hook.foreign.iter().map(|(n, why)| format!("{n} ({why})")).collect();
                self.events.push(
                    PlannedEvent::warning(
                        "HookRunNameTaken",
                        format!(
                            "pod {}: HookRun name(s) taken by runs not made for this change, which are ignored: {}; \
                         creating {}",
                            info.name,
                            skipped.join(", "),
                            hook.run_name
                        ),
                    )
                    .about_pod(&info.pod_ref()),
                );
            }
            self.actions.push(Action::CreateHookRun(run));
        }
        let decision = match (handler_hold, decision) {
            (None, decision) => decision,
            (Some(handler), GateDecision::Allow) => GateDecision::Wait(handler),
            (Some(handler), GateDecision::Wait(hook)) => GateDecision::Wait(format!("{hook}; {handler}")),
            (Some(handler), GateDecision::Blocked(hook)) => GateDecision::Blocked(format!("{hook}; {handler}")),
        };
        let state = gate::preparing_state(kind);
        let mut writes = Vec::new();
        let mut summary = Vec::new();
        // markPodNotReady: out of Service endpoints while held (status first, before anything else changes).
        if which.is_some_and(|w| lifecycle::marks_not_ready(settings.gd, w))
            && let Some(ops) = lifecycle::kruise_ready_ops(info.pod, false, Some(state.as_str()), settings.now)
        {
            writes.push(PodWrite::Status(ops));
            summary.push(format!("{} False", lifecycle::KRUISE_POD_READY));
        }
        // Pods we did not create (adopted, made by BCS) may have no labels or annotations map at all.
        let mut ops = patch::ensure_maps(info.pod);
        let maps = ops.len();
        if info.state != state {
            ops.extend(lifecycle::set_state_ops(state, settings.now));
            summary.insert(0, format!("held in {}: {}", state.as_str(), decision.reason().unwrap_or_default()));
        }
        // BCS: game servers read this annotation to stop taking players once their pre-delete hook starts; it is
        // removed again if the pod is released (`housekeeping::release_unneeded_holds`).
        if run_created
            && matches!(kind, GateKind::Delete(_))
            && common::pod::annotation(info.pod, keys::GAME_POD_DELETING) != Some("true")
        {
            ops.push(json!({"op": "add", "path": patch::annotation_path(keys::GAME_POD_DELETING), "value": "true"}));
            summary.push(format!("{}: true", keys::GAME_POD_DELETING));
        }
        if ops.len() > maps {
            writes.push(PodWrite::Object(ops));
        }
        if !writes.is_empty() {
            self.actions.push(Action::PatchPod(PodChange {
                pod: info.pod_ref(),
                reason: PatchReason::Lifecycle,
                writes,
                summary: summary.join("; "),
            }));
        }
        self.held_names.insert(info.name.to_string());
        self.held.push(HeldPod { name: info.name.to_string(), kind, decision, hook: verdict.hook });
        false
    }

    /// When to look again at the latest (None: only when something changes).
    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue
    }
}
