//! Shadow hooks (addition; Argo Rollouts calls them `dryRun`): `preDeleteUpdateStrategy.shadowHook`,
//! `preInplaceUpdateStrategy.shadowHook` and `postInplaceUpdateStrategy.shadowHook` name a HookTemplate a team
//! trials on live servers before making it binding.
//!
//! - **Made** when a pod's change starts — the pod enters `PreparingDelete` / `PreparingUpdate`, or is deleted or
//!   patched in place this pass when no real hook holds it — or, for the post-inplace kind, when its in-place
//!   update completes (the pod enters `Updated`, or goes straight back to `Normal` when no real hook holds it):
//!   one run per pod, hook and revision ([`run_name`]), from the template with the same injected args as a real
//!   run. A canary step's `shadowHook` is made when the rollout reaches the step ([`StepDecision::judged_step`]):
//!   one run per revision and step ([`canary_run_name`]), with the step's args; the step never waits for it.
//!
//! [`StepDecision::judged_step`]: super::canary::StepDecision::judged_step
//! - **Never consulted by a gate**: its type label is `shadow-<type>` and its name starts with `shadow-`, so the
//!   gate's look-ups (by the names and signed stamps of its own attempts) never find it, and it carries no stamp.
//! - **Recorded** once it ends: an entry of `status.shadowHookResults` (the newest [`MAX_SHADOW_RESULTS`], each
//!   with what the real gate of the pod said at that moment) and an Event, once; the controller counts it in
//!   `gamedeployment_hook_outcomes_total{shadow="true"}`.
//! - **Removed** once its pod moved on (gone, or no longer changing towards that revision) and its result is
//!   recorded — or an hour after it was made if it never ends.

use common::api::{
    GameDeploymentStatus, HookCondition, HookPhase, HookRun, HookStep, MAX_SHADOW_RESULTS, ShadowHookResult,
};
use common::cached_pod::Pod;
use common::hookrun::{self, HookKind, NewHookRun};
use common::keys;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::plan_draft::Draft;
use super::settings::{PodInfo, Settings};
use crate::action::{Action, PatchReason, PlannedEvent};
use crate::gate;
use crate::lifecycle::LifecycleState;

/// The kinds a shadow hook may be given.
const KINDS: [HookKind; 4] = [HookKind::PreDelete, HookKind::PreInplace, HookKind::PostInplace, HookKind::CanaryStep];

/// Prefix of a shadow run's type label (`shadow-pre-delete-step`) and name.
pub(crate) const PREFIX: &str = "shadow-";

/// How long a shadow run that never ends is kept after its pod moved on, in seconds.
const UNFINISHED_KEPT_SECONDS: i64 = 3600;

/// The shadow hook of canary step `index`.
fn canary_shadow(gd: &common::api::GameDeployment, index: usize) -> Option<&HookStep> {
    gd.spec.update_strategy.canary.as_ref()?.steps.get(index)?.shadow_hook.as_ref()
}

/// The pod hook's shadow configured for `kind` (None for the canary kind: see [`canary_shadow`]).
pub(crate) fn shadow_hook(gd: &common::api::GameDeployment, kind: HookKind) -> Option<&HookStep> {
    match kind {
        HookKind::PreDelete => gd.spec.pre_delete_update_strategy.as_ref()?.shadow_hook.as_ref(),
        HookKind::PreInplace => gd.spec.pre_inplace_update_strategy.as_ref()?.shadow_hook.as_ref(),
        HookKind::PostInplace => gd.spec.post_inplace_update_strategy.as_ref()?.shadow_hook.as_ref(),
        HookKind::CanaryStep => None,
    }
}

/// The kind of a shadow run (None for any other run).
pub fn kind_of(run: &HookRun) -> Option<HookKind> {
    let type_ = run.metadata.labels.as_ref()?.get(keys::HOOKRUN_TYPE)?.strip_prefix(PREFIX)?;
    KINDS.into_iter().find(|k| k.type_label() == type_)
}

/// The spec field a shadow kind is configured in, for messages and `status.shadowHookResults[].hook`.
fn field(kind: HookKind) -> &'static str {
    match kind {
        HookKind::PreDelete => "preDelete",
        HookKind::PostInplace => "postInplace",
        HookKind::CanaryStep => "canaryStep",
        HookKind::PreInplace => "preInplace",
    }
}

/// The one run of a pod's change towards `revision` (names are at most 253 characters: a long one is cut and ends
/// with a hash of the whole).
pub(crate) fn run_name(kind: HookKind, pod: &str, revision: &str, template: &str) -> String {
    bounded(format!("{PREFIX}{}-{pod}-{revision}-{template}", kind.prefix()))
}

/// The one run of canary step `index` of `revision`.
pub(crate) fn canary_run_name(revision: &str, index: usize, template: &str) -> String {
    bounded(format!("{PREFIX}{}-{revision}-{index}-{template}", HookKind::CanaryStep.prefix()))
}

/// `name`, or, past the 253 characters a name may hold, its first 240 and a hash of the whole.
fn bounded(name: String) -> String {
    if name.len() <= 253 {
        return name;
    }
    let hash = crate::revision::fnv32a(name.as_bytes());
    let mut cut: String = name.chars().take(240).collect();
    while cut.ends_with(['-', '.']) {
        cut.pop();
    }
    format!("{cut}-{hash:08x}")
}

/// The pods this pass deletes, the pods it patches to another revision and the pods whose in-place update it
/// completes (read once, not per pod).
struct Acted<'d> {
    deleted: std::collections::BTreeSet<&'d str>,
    patched: std::collections::BTreeSet<&'d str>,
    completed: std::collections::BTreeSet<&'d str>,
}

impl<'d> Acted<'d> {
    fn of(draft: &'d Draft) -> Self {
        let mut acted =
            Self { deleted: Default::default(), patched: Default::default(), completed: Default::default() };
        for action in &draft.actions {
            match action {
                Action::DeletePod { pod, .. } => {
                    acted.deleted.insert(pod.name.as_str());
                }
                Action::PatchPod(c)
                    if matches!(
                        c.reason,
                        PatchReason::InPlaceUpdate | PatchReason::InPlaceGraceEnded | PatchReason::HotPatchUpdate
                    ) =>
                {
                    acted.patched.insert(c.pod.name.as_str());
                }
                Action::PatchPod(c) if c.reason == PatchReason::InPlaceUpdateCompleted => {
                    acted.completed.insert(c.pod.name.as_str());
                }
                _ => {}
            }
        }
        acted
    }
}

/// The revision a pod's change of `kind` moves it to when it is changing this pass (`None` otherwise).
fn changing<'a>(
    settings: &'a Settings<'_>,
    kind: HookKind,
    info: &'a PodInfo<'_>,
    acted: &Acted<'_>,
) -> Option<&'a str> {
    match kind {
        HookKind::PreDelete => (info.state == LifecycleState::PreparingDelete || acted.deleted.contains(info.name))
            .then_some(info.revision.unwrap_or("")),
        // After the change: the revision the pod now runs.
        HookKind::PostInplace => (info.state == LifecycleState::Updated || acted.completed.contains(info.name))
            .then_some(info.revision.unwrap_or("")),
        _ => (info.state == LifecycleState::PreparingUpdate || acted.patched.contains(info.name))
            .then_some(settings.update_revision.as_str()),
    }
}

/// The shadow runs this GameDeployment made.
fn shadow_runs<'a>(settings: &Settings<'a>) -> impl Iterator<Item = (&'a HookRun, HookKind)> + 'a {
    super::hooks::owned_runs(settings).filter_map(|r| Some((r, kind_of(r)?)))
}

/// Plans the shadow runs to make (pods whose change starts) and to remove (recorded, and their pod moved on).
pub(crate) fn plan(
    settings: &Settings<'_>,
    infos: &[PodInfo<'_>],
    old: &GameDeploymentStatus,
    judged_step: Option<usize>,
    draft: &mut Draft,
) {
    let existing: std::collections::BTreeSet<&str> =
        shadow_runs(settings).filter_map(|(r, _)| r.metadata.name.as_deref()).collect();
    let recorded = |name: &str| old.shadow_hook_results.iter().any(|r| r.hook_run == name);
    let mut wanted = std::collections::BTreeSet::new();
    // Made after the look at this pass's actions (which the new ones must not change).
    let (mut creates, mut problems) = (Vec::new(), Vec::new());
    let acted = Acted::of(draft);
    for kind in KINDS {
        let Some(step) = shadow_hook(settings.gd, kind) else { continue };
        for info in infos {
            let Some(revision) = changing(settings, kind, info, &acted) else { continue };
            let name = run_name(kind, info.name, revision, &step.template_name);
            if existing.contains(name.as_str()) || recorded(&name) {
                wanted.insert(name);
                continue;
            }
            match make(settings, kind, step, info.pod, revision, name.clone()) {
                Ok(run) => creates.push(Action::CreateHookRun(Box::new(run))),
                // A missing template or arg: the shadow hook only reports it (nothing waits for it).
                Err(problem) => problems.push(
                    PlannedEvent::warning(
                        "ShadowHookNotCreated",
                        format!("shadow {} hook of pod {}: {problem}", field(kind), info.name),
                    )
                    .about_pod(&info.pod_ref()),
                ),
            }
            wanted.insert(name);
        }
    }
    // The canary step the rollout is at: its trial run, made once.
    if let Some((index, step)) = judged_step.and_then(|i| Some((i, canary_shadow(settings.gd, i)?))) {
        let name = canary_run_name(&settings.template_revision, index, &step.template_name);
        if !existing.contains(name.as_str()) && !recorded(&name) {
            match make_canary(settings, index, step, name.clone()) {
                Ok(run) => creates.push(Action::CreateHookRun(Box::new(run))),
                Err(problem) => problems.push(PlannedEvent::warning(
                    "ShadowHookNotCreated",
                    format!("shadow hook of canary step {}: {problem}", index + 1),
                )),
            }
        }
        wanted.insert(name);
    }
    draft.actions.extend(creates);
    draft.events.extend(problems);
    let now = settings.now.as_second();
    for (run, _) in shadow_runs(settings) {
        let name = run.metadata.name.clone().unwrap_or_default();
        if wanted.contains(&name) || run.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let age = run.metadata.creation_timestamp.as_ref().map_or(0, |t| now - t.0.as_second());
        let why = if recorded(&name) {
            "its result is recorded and its pod moved on".to_string()
        } else if age > UNFINISHED_KEPT_SECONDS {
            "its pod moved on and it did not end within an hour".to_string()
        } else {
            continue;
        };
        draft.actions.push(Action::DeleteHookRun { name, uid: run.metadata.uid.clone().unwrap_or_default(), why });
    }
}

/// The shadow run of a pod: the real run's template, args and labels, with the shadow type and the pod's UID.
fn make(
    settings: &Settings<'_>,
    kind: HookKind,
    step: &HookStep,
    pod: &Pod,
    revision: &str,
    name: String,
) -> Result<HookRun, String> {
    let mut run = gate::build_pod_run(&settings.gate, kind, step, pod, revision, &[], name)?;
    let labels = run.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(keys::HOOKRUN_TYPE.into(), format!("{PREFIX}{}", kind.type_label()));
    if let Some(uid) = pod.metadata.uid.as_deref() {
        labels.insert(keys::HOOKRUN_POD_UID.into(), uid.into());
    }
    Ok(run)
}

/// The shadow run of canary step `index`: the step run's labels (revision, step, workload) with the shadow type,
/// and the step's args.
fn make_canary(settings: &Settings<'_>, index: usize, step: &HookStep, name: String) -> Result<HookRun, String> {
    let gd = settings.gd;
    let namespace = gd.metadata.namespace.clone().unwrap_or_default();
    let template = settings
        .gate
        .templates
        .iter()
        .find(|t| t.metadata.name.as_deref() == Some(step.template_name.as_str()))
        .ok_or_else(|| format!("HookTemplate {:?} not found in namespace {namespace}", step.template_name))?;
    let mut labels =
        hookrun::canary_hook_labels(&settings.template_revision, index, gd.metadata.name.as_deref().unwrap_or(""));
    labels.insert(keys::HOOKRUN_TYPE.into(), format!("{PREFIX}{}", HookKind::CanaryStep.type_label()));
    let new = NewHookRun {
        name,
        namespace,
        labels,
        owner: Some(crate::ownership::owner_reference(gd)),
        args: hookrun::step_args(step),
    };
    hookrun::from_template(template, new).map_err(|e| e.to_string())
}

/// The canary step a canary shadow run was made for (its step index label).
fn step_of(run: &HookRun) -> Option<usize> {
    run.metadata.labels.as_ref()?.get(keys::HOOKRUN_CANARY_STEP_INDEX)?.parse().ok()
}

/// Records the shadow runs that ended in `status.shadowHookResults` (with an Event the first time), keeping the
/// newest [`MAX_SHADOW_RESULTS`] by the time each ended.
pub(crate) fn status(settings: &Settings<'_>, status: &mut GameDeploymentStatus, events: &mut Vec<PlannedEvent>) {
    let mut results = status.shadow_hook_results.clone();
    let mut new = Vec::new();
    for (run, kind) in shadow_runs(settings) {
        let phase = gate::run_phase(run);
        let name = run.metadata.name.clone().unwrap_or_default();
        if !phase.is_completed() || results.iter().any(|r| r.hook_run == name) {
            continue;
        }
        let label = |key: &str| run.metadata.labels.as_ref().and_then(|l| l.get(key)).cloned().unwrap_or_default();
        let canary_step = (kind == HookKind::CanaryStep).then(|| step_of(run)).flatten();
        let pod_name = if kind == HookKind::CanaryStep {
            String::new()
        } else {
            pod_of(run).unwrap_or_else(|| label(keys::HOOKRUN_INSTANCE_ID))
        };
        let template_name = match canary_step {
            Some(index) => canary_shadow(settings.gd, index),
            None => shadow_hook(settings.gd, kind),
        }
        .map(|s| s.template_name.clone())
        .unwrap_or_default();
        let gate = match canary_step {
            Some(index) => real_step_gate(settings, status, index),
            None => real_gate(settings, status, kind, &pod_name),
        };
        // A fixed time per run (its last measurement's end, else its creation), so a result trimmed from the list
        // sorts the same at every pass and is never recorded (nor announced) again.
        let finished = gate::run_finished(run)
            .or_else(|| run.metadata.creation_timestamp.as_ref().map(|t| t.0))
            .unwrap_or(settings.now);
        let message = run.status.as_ref().and_then(|s| s.message.clone()).filter(|m| !m.trim().is_empty());
        let result = ShadowHookResult {
            hook: field(kind).to_string(),
            template_name,
            gate,
            pod_name,
            canary_step: canary_step.map(|i| i32::try_from(i).unwrap_or(i32::MAX)),
            hook_run: name,
            phase,
            message: message.map(|m| common::runtime::text::excerpt(&m, 300)),
            finished_at: Time(finished),
        };
        results.push(result.clone());
        new.push(result);
    }
    results.sort_by(|a, b| a.finished_at.0.cmp(&b.finished_at.0).then_with(|| a.hook_run.cmp(&b.hook_run)));
    let excess = results.len().saturating_sub(MAX_SHADOW_RESULTS);
    results.drain(..excess);
    for result in new.iter().filter(|n| results.iter().any(|r| r.hook_run == n.hook_run)) {
        events.push(event(result));
    }
    status.shadow_hook_results = results;
}

/// The pod a shadow run was made for (its `PodName` arg).
fn pod_of(run: &HookRun) -> Option<String> {
    run.spec.args.iter().find(|a| a.name == keys::hook_args::POD_NAME).and_then(|a| a.value.clone())
}

/// What the real gate of the pod said when the shadow run ended.
fn real_gate(settings: &Settings<'_>, status: &GameDeploymentStatus, kind: HookKind, pod: &str) -> String {
    let spec = &settings.gd.spec;
    let configured = match kind {
        HookKind::PreDelete => spec.pre_delete_update_strategy.as_ref().and_then(|s| s.hook.as_ref()),
        HookKind::PostInplace => spec.post_inplace_update_strategy.as_ref().and_then(|s| s.hook.as_ref()),
        _ => spec.pre_inplace_update_strategy.as_ref().and_then(|s| s.hook.as_ref()),
    };
    if configured.is_none() {
        return "no hook".to_string();
    }
    let held: &[HookCondition] = match kind {
        HookKind::PreDelete => &status.pre_delete_hook_condition,
        HookKind::PostInplace => &status.post_inplace_hook_condition,
        _ => &status.pre_inplace_hook_condition,
    };
    match held.iter().find(|c| c.pod_name == pod) {
        Some(c) => c.phase.to_string(),
        None => "not holding".to_string(),
    }
}

/// What the real hook of canary step `index` said when its shadow run ended: `no hook`, the step run's phase while
/// the rollout is at that step, else `not holding`.
fn real_step_gate(settings: &Settings<'_>, status: &GameDeploymentStatus, index: usize) -> String {
    let step = settings.gd.spec.update_strategy.canary.as_ref().and_then(|c| c.steps.get(index));
    if step.is_none_or(|s| s.hook.is_none()) {
        return "no hook".to_string();
    }
    if status.current_step_index.and_then(|i| usize::try_from(i).ok()) != Some(index) {
        return "not holding".to_string();
    }
    let run = status.canary.as_ref().and_then(|c| c.current_step_hook_run.as_deref());
    settings
        .gate
        .hook_runs
        .iter()
        .find(|r| run.is_some() && r.metadata.name.as_deref() == run)
        .map_or_else(|| HookPhase::Pending.to_string(), |r| gate::run_phase(r).to_string())
}

fn event(result: &ShadowHookResult) -> PlannedEvent {
    if let Some(index) = result.canary_step {
        let (reason, verdict) = match result.phase {
            HookPhase::Successful => ("ShadowHookSucceeded", "would have let the rollout go on"),
            _ => ("ShadowHookFailed", "would have paused the rollout"),
        };
        let why = result.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
        let message = format!(
            "shadow hook {} of canary step {} ended {} and {verdict} (real gate: {}){why}",
            result.hook_run,
            index + 1,
            result.phase,
            result.gate
        );
        return PlannedEvent::normal(reason, message);
    }
    let (reason, verdict) = match result.phase {
        HookPhase::Successful => ("ShadowHookSucceeded", "would have let it go"),
        _ => ("ShadowHookFailed", "would have held it"),
    };
    let why = result.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
    let message = format!(
        "shadow {} hook {} of pod {} ended {} and {verdict} (real gate: {}){why}",
        result.hook, result.hook_run, result.pod_name, result.phase, result.gate
    );
    PlannedEvent::normal(reason, message).about(crate::action::Related::pod(&result.pod_name, None))
}

#[cfg(test)]
mod tests {
    use common::api::{HookPhase, HookRunStatus};
    use serde_json::json;

    use super::*;
    use crate::fixtures::{gd, hook_template};
    use crate::planner::sim_cluster::World;

    fn world(strategy: serde_json::Value, replicas: i32) -> World {
        let mut g = gd(replicas, "InplaceUpdate");
        g.spec.pre_delete_update_strategy = serde_json::from_value(strategy["preDelete"].clone()).expect("valid");
        g.spec.pre_inplace_update_strategy = serde_json::from_value(strategy["preInplace"].clone()).expect("valid");
        g.spec.post_inplace_update_strategy = serde_json::from_value(strategy["postInplace"].clone()).expect("valid");
        let mut world = World::new(g);
        world.hook_templates.push(hook_template());
        assert!(world.settle(50, |_, _| {}).is_some(), "did not settle");
        world
    }

    fn shadows(world: &World) -> Vec<String> {
        world.hook_runs.iter().filter(|r| kind_of(r).is_some()).filter_map(|r| r.metadata.name.clone()).collect()
    }

    fn real(world: &World) -> Vec<String> {
        world.hook_runs.iter().filter(|r| kind_of(r).is_none()).filter_map(|r| r.metadata.name.clone()).collect()
    }

    fn end(world: &mut World, name: &str, phase: HookPhase) {
        for run in world.hook_runs.iter_mut().filter(|r| r.metadata.name.as_deref() == Some(name)) {
            std::sync::Arc::make_mut(run).status = Some(HookRunStatus { phase: Some(phase), ..Default::default() });
        }
    }

    fn passes(world: &mut World, n: usize) -> Vec<PlannedEvent> {
        let mut events = Vec::new();
        for _ in 0..n {
            world.tick(1);
            events.extend(world.pass().events);
        }
        events
    }

    #[test]
    fn a_failing_shadow_hook_alone_never_holds_a_pod_and_is_recorded_once() {
        let mut world = world(json!({"preDelete": {"shadowHook": {"templateName": "drain"}}}), 3);
        world.gd.spec.replicas = Some(2);
        passes(&mut world, 2);
        assert_eq!(world.active().len(), 2, "deleted at once: nothing holds it");
        let made = shadows(&world);
        assert_eq!(made.len(), 1, "{made:?}");
        assert!(made[0].starts_with("shadow-predelete-game-"), "{made:?}");
        let run = &world.hook_runs[0];
        assert_eq!(run.metadata.labels.as_ref().unwrap()[keys::HOOKRUN_TYPE], "shadow-pre-delete-step");
        assert!(run.metadata.annotations.is_none(), "no gate stamp: {:?}", run.metadata.annotations);
        end(&mut world, &made[0], HookPhase::Failed);
        let events = passes(&mut world, 3);
        let results = world.gd.status.as_ref().unwrap().shadow_hook_results.clone();
        assert_eq!(results.len(), 1, "{results:?}");
        assert_eq!(
            (results[0].phase, results[0].gate.as_str(), results[0].hook.as_str()),
            (HookPhase::Failed, "no hook", "preDelete")
        );
        let recorded: Vec<&PlannedEvent> = events.iter().filter(|e| e.reason == "ShadowHookFailed").collect();
        assert_eq!(recorded.len(), 1, "one Event: {events:?}");
        assert!(recorded[0].message.contains("would have held it (real gate: no hook)"), "{}", recorded[0].message);
        assert!(shadows(&world).is_empty(), "removed once recorded, its pod gone");
        assert_eq!(world.gd.status.as_ref().unwrap().shadow_hook_results.len(), 1, "the record stays");
    }

    #[test]
    fn a_shadow_hook_beside_a_real_one_never_shortens_its_hold() {
        let strategy =
            json!({"preDelete": {"hook": {"templateName": "drain"}, "shadowHook": {"templateName": "drain"}}});
        let mut world = world(strategy, 3);
        world.gd.spec.replicas = Some(2);
        passes(&mut world, 3);
        let (shadow, gate) = (shadows(&world), real(&world));
        assert_eq!((shadow.len(), gate.len()), (1, 1), "{:?}", world.hook_runs);
        end(&mut world, &shadow[0], HookPhase::Successful);
        let events = passes(&mut world, 5);
        assert_eq!(world.active().len(), 3, "the real hook still holds the pod");
        assert!(events.iter().any(|e| e.reason == "ShadowHookSucceeded"), "{events:?}");
        let results = world.gd.status.as_ref().unwrap().shadow_hook_results.clone();
        assert_eq!(results[0].gate, "Pending", "{results:?}");
        assert_eq!(shadows(&world), shadow, "kept while its pod still waits");
        end(&mut world, &gate[0], HookPhase::Successful);
        passes(&mut world, 4);
        assert_eq!(world.active().len(), 2, "the real hook decided");
        assert!(shadows(&world).is_empty());
    }

    #[test]
    fn an_in_place_update_makes_one_shadow_run_per_pod_towards_the_new_revision() {
        let mut world = world(json!({"preInplace": {"shadowHook": {"templateName": "drain"}}}), 2);
        world.gd.spec.update_strategy.max_unavailable =
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2));
        world.gd.spec.template.spec.as_mut().unwrap().containers[0].image = Some("game:2".into());
        world.gd.metadata.generation = Some(2);
        passes(&mut world, 3);
        let revision = world.update_revision().unwrap();
        let made = shadows(&world);
        assert_eq!(made.len(), 2, "{made:?}");
        assert!(made.iter().all(|n| n.starts_with("shadow-preinplace-") && n.contains(&revision)), "{made:?}");
        assert_eq!(world.revision_counts(), (2, 0), "updated without waiting");
    }

    /// Rolls the image of `world` to `game:2` with room to update every pod at once.
    fn roll_image(world: &mut World) {
        world.gd.spec.update_strategy.max_unavailable =
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2));
        world.gd.spec.template.spec.as_mut().unwrap().containers[0].image = Some("game:2".into());
        world.gd.metadata.generation = Some(2);
    }

    #[test]
    fn a_failing_post_inplace_shadow_hook_alone_never_holds_a_pod_and_is_recorded() {
        let mut world = world(json!({"postInplace": {"shadowHook": {"templateName": "drain"}}}), 2);
        roll_image(&mut world);
        passes(&mut world, 6);
        let revision = world.update_revision().unwrap();
        let made = shadows(&world);
        assert_eq!(made.len(), 2, "one per pod, once its update completed: {made:?}");
        assert!(made.iter().all(|n| n.starts_with("shadow-postinplace-") && n.contains(&revision)), "{made:?}");
        let run = world.hook_runs.iter().find(|r| kind_of(r).is_some()).unwrap();
        assert_eq!(run.metadata.labels.as_ref().unwrap()[keys::HOOKRUN_TYPE], "shadow-post-inplace-step");
        assert!(run.metadata.annotations.is_none(), "no gate stamp: {:?}", run.metadata.annotations);
        assert_eq!(world.revision_counts(), (2, 0));
        assert_eq!(world.serving(), 2, "back in service at once: nothing holds them in Updated");
        for name in &made {
            end(&mut world, name, HookPhase::Failed);
        }
        let events = passes(&mut world, 3);
        let results = world.gd.status.as_ref().unwrap().shadow_hook_results.clone();
        assert_eq!(results.len(), 2, "{results:?}");
        assert!(results.iter().all(|r| r.hook == "postInplace" && r.gate == "no hook"), "{results:?}");
        assert_eq!(events.iter().filter(|e| e.reason == "ShadowHookFailed").count(), 2, "{events:?}");
        assert_eq!(world.serving(), 2, "a failed shadow run takes nothing out of service");
        assert!(shadows(&world).is_empty(), "removed once recorded, their pods moved on");
    }

    #[test]
    fn a_post_inplace_shadow_hook_beside_a_real_one_never_shortens_its_hold() {
        let strategy =
            json!({"postInplace": {"hook": {"templateName": "drain"}, "shadowHook": {"templateName": "drain"}}});
        let mut world = world(strategy, 2);
        roll_image(&mut world);
        passes(&mut world, 6);
        let (shadow, gate) = (shadows(&world), real(&world));
        assert_eq!((shadow.len(), gate.len()), (2, 2), "{:?}", world.hook_runs);
        for name in &shadow {
            end(&mut world, name, HookPhase::Successful);
        }
        let events = passes(&mut world, 4);
        assert_eq!(events.iter().filter(|e| e.reason == "ShadowHookSucceeded").count(), 2, "{events:?}");
        let results = world.gd.status.as_ref().unwrap().shadow_hook_results.clone();
        assert!(results.iter().all(|r| r.gate == "Pending" || r.gate == "Running"), "{results:?}");
        let held = world.gd.status.as_ref().unwrap().post_inplace_hook_condition.len();
        assert_eq!(held, 2, "the real post-inplace hook still holds both pods in Updated");
        for name in &gate {
            end(&mut world, name, HookPhase::Successful);
        }
        passes(&mut world, 4);
        assert!(world.gd.status.as_ref().unwrap().post_inplace_hook_condition.is_empty(), "the real hook decided");
        assert!(shadows(&world).is_empty());
    }

    /// 4 pods on `game:1`, then `game:2` under the canary `steps`.
    fn canary(steps: serde_json::Value) -> World {
        let mut g = gd(4, "InplaceUpdate");
        g.spec.update_strategy.canary = Some(serde_json::from_value(json!({ "steps": steps })).expect("valid canary"));
        let mut world = World::new(g);
        // A step's run has no pod to take args from.
        let mut check = hook_template();
        check.metadata.name = Some("check".into());
        check.spec.args.clear();
        world.hook_templates.push(check);
        assert!(world.settle(50, |_, _| {}).is_some(), "did not settle");
        world.gd.spec.update_strategy.max_unavailable =
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(4));
        world.gd.spec.template.spec.as_mut().unwrap().containers[0].image = Some("game:2".into());
        world.gd.metadata.generation = Some(2);
        world
    }

    #[test]
    fn a_failing_canary_shadow_hook_never_holds_its_step_and_is_recorded() {
        let mut world = canary(json!([{"partition": 2}, {"shadowHook": {"templateName": "check"}}, {"partition": 0}]));
        passes(&mut world, 12);
        assert_eq!(world.revision_counts(), (4, 0), "the rollout went through the trial step");
        let made = shadows(&world);
        let revision = world.update_revision().unwrap();
        assert_eq!(made, vec![format!("shadow-canary-{revision}-1-check")], "one run, for step 1");
        let run = world.hook_runs.iter().find(|r| kind_of(r).is_some()).unwrap();
        assert_eq!(run.metadata.labels.as_ref().unwrap()[keys::HOOKRUN_TYPE], "shadow-canary-step");
        end(&mut world, &made[0], HookPhase::Failed);
        let events = passes(&mut world, 3);
        let results = world.gd.status.as_ref().unwrap().shadow_hook_results.clone();
        assert_eq!(results.len(), 1, "{results:?}");
        let r = &results[0];
        assert_eq!(
            (r.hook.as_str(), r.canary_step, r.pod_name.as_str(), r.gate.as_str(), r.phase),
            ("canaryStep", Some(1), "", "no hook", HookPhase::Failed)
        );
        let failed: Vec<&PlannedEvent> = events.iter().filter(|e| e.reason == "ShadowHookFailed").collect();
        assert_eq!(failed.len(), 1, "{events:?}");
        assert!(
            failed[0].message.contains("of canary step 2 ended Failed and would have paused the rollout"),
            "{}",
            failed[0].message
        );
        assert!(shadows(&world).is_empty(), "removed once recorded, the rollout past its step");
    }

    #[test]
    fn a_canary_shadow_hook_beside_the_steps_hook_never_shortens_its_wait() {
        let step = json!({"hook": {"templateName": "check"}, "shadowHook": {"templateName": "check"}});
        let mut world = canary(json!([{"partition": 2}, step]));
        passes(&mut world, 10);
        let (shadow, gate) = (shadows(&world), real(&world));
        assert_eq!((shadow.len(), gate.len()), (1, 1), "{:?}", world.hook_runs);
        end(&mut world, &shadow[0], HookPhase::Successful);
        let events = passes(&mut world, 5);
        assert!(events.iter().any(|e| e.reason == "ShadowHookSucceeded"), "{events:?}");
        let status = world.gd.status.clone().unwrap();
        assert_eq!(status.shadow_hook_results[0].gate, "Pending", "{:?}", status.shadow_hook_results);
        assert_eq!((status.current_step_index, world.revision_counts()), (Some(1), (2, 2)), "still at the hook step");
        end(&mut world, &gate[0], HookPhase::Successful);
        passes(&mut world, 8);
        assert_eq!(world.revision_counts(), (4, 0), "the step's own hook decided");
        assert!(shadows(&world).is_empty());
    }

    #[test]
    fn the_newest_twenty_results_are_kept_each_recorded_once() {
        let mut world = world(json!({"preDelete": {"shadowHook": {"templateName": "drain"}}}), 25);
        world.gd.spec.replicas = Some(0);
        passes(&mut world, 4);
        let made = shadows(&world);
        assert_eq!(made.len(), 25, "{made:?}");
        for name in &made {
            end(&mut world, name, HookPhase::Successful);
        }
        let events = passes(&mut world, 4);
        assert_eq!(world.gd.status.as_ref().unwrap().shadow_hook_results.len(), MAX_SHADOW_RESULTS);
        assert_eq!(events.iter().filter(|e| e.reason == "ShadowHookSucceeded").count(), MAX_SHADOW_RESULTS);
    }

    #[test]
    fn an_unfinished_shadow_run_goes_an_hour_after_its_pod() {
        let mut world = world(json!({"preDelete": {"shadowHook": {"templateName": "drain"}}}), 2);
        world.gd.spec.replicas = Some(1);
        passes(&mut world, 3);
        assert_eq!((world.active().len(), shadows(&world).len()), (1, 1), "the pod went, its run still measures");
        world.tick(UNFINISHED_KEPT_SECONDS - 10);
        passes(&mut world, 1);
        assert_eq!(shadows(&world).len(), 1, "kept within the hour");
        world.tick(20);
        passes(&mut world, 1);
        assert!(shadows(&world).is_empty(), "removed after it");
    }

    #[test]
    fn a_missing_template_is_reported_and_holds_nothing() {
        let mut world = world(json!({"preDelete": {"shadowHook": {"templateName": "nope"}}}), 2);
        world.gd.spec.replicas = Some(1);
        let events = passes(&mut world, 3);
        assert_eq!(world.active().len(), 1);
        let warning = events.iter().find(|e| e.reason == "ShadowHookNotCreated").expect("a Warning Event");
        assert!(warning.message.contains("HookTemplate \"nope\" not found"), "{}", warning.message);
    }

    #[test]
    fn run_names_stay_within_253_characters() {
        let long = "t".repeat(250);
        let name = run_name(HookKind::PreDelete, "game-abcde", "game-12345", &long);
        assert!(name.len() <= 253 && name.starts_with("shadow-predelete-game-abcde"), "{name}");
        assert_ne!(name, run_name(HookKind::PreDelete, "game-abcdf", "game-12345", &long));
    }
}
