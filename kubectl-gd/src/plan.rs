//! `kubectl gd plan`: reads the live GameDeployment and what its planner looks at (get and list only), makes the
//! change in memory and prints the forecast of the operator's own planner
//! ([`gamedeployment_operator::forecast`]): batches in order, each pod's action and the hook it waits on with that
//! hook's probe schedule, where the rollout stops, and the estimated duration.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use common::api::{GameDeployment, HookPhase, HookRun, HookTemplate};
use gamedeployment_operator::forecast::{Assume, LifecycleHold, Live, PodStep, Race, StopReason, Timeline};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::ListParams;

use crate::cluster::{Error, Target, pod_selector, run_selector};
use crate::rollout::State;

/// The change to forecast, as given on the command line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Change {
    /// A changed manifest of the GameDeployment (`-f`): its spec replaces the live one; its labels and annotations
    /// are added to the live ones.
    pub manifest: Option<GameDeployment>,
    pub replicas: Option<i32>,
    /// (container, image).
    pub images: Vec<(String, String)>,
    /// An integer or a percentage.
    pub partition: Option<String>,
}

/// Makes `change` to `gd` (in memory). Returns what changed, in words, or why the change cannot be made.
pub fn apply(gd: &mut GameDeployment, change: &Change) -> Result<Vec<String>, String> {
    let mut said = Vec::new();
    let name = gd.metadata.name.clone().unwrap_or_default();
    if let Some(manifest) = &change.manifest {
        if let Some(other) = manifest.metadata.name.as_deref().filter(|n| *n != name) {
            return Err(format!("the file describes gamedeployment {other}, not {name}"));
        }
        gd.spec = manifest.spec.clone();
        for (mine, theirs) in [
            (&mut gd.metadata.labels, &manifest.metadata.labels),
            (&mut gd.metadata.annotations, &manifest.metadata.annotations),
        ] {
            if let Some(theirs) = theirs {
                mine.get_or_insert_with(BTreeMap::new).extend(theirs.clone());
            }
        }
        said.push("the spec of the file".to_string());
    }
    if let Some(replicas) = change.replicas {
        if replicas < 0 {
            return Err(format!("--replicas {replicas}: must not be negative"));
        }
        gd.spec.replicas = Some(replicas);
        said.push(format!("replicas {replicas}"));
    }
    for (container, image) in &change.images {
        let containers = gd.spec.template.spec.as_mut().map(|s| &mut s.containers);
        let Some(found) = containers.and_then(|c| c.iter_mut().find(|c| &c.name == container)) else {
            let names: Vec<String> =
                gd.spec.template.spec.iter().flat_map(|s| &s.containers).map(|c| c.name.clone()).collect();
            return Err(format!(
                "--image {container}={image}: no container {container:?} (containers: {})",
                names.join(", ")
            ));
        };
        found.image = Some(image.clone());
        said.push(format!("image {container}={image}"));
    }
    if let Some(partition) = &change.partition {
        let value = match partition.strip_suffix('%') {
            Some(percent) if percent.parse::<u32>().is_ok_and(|p| p <= 100) => IntOrString::String(partition.clone()),
            None if partition.parse::<u32>().is_ok() => IntOrString::Int(partition.parse().unwrap_or(0)),
            _ => return Err(format!("--partition {partition}: an integer or a percentage (e.g. 2, 40%)")),
        };
        gd.spec.update_strategy.partition = Some(value);
        said.push(format!("partition {partition}"));
    }
    if said.is_empty() {
        return Err("no change given: -f FILE, --replicas, --image or --partition".into());
    }
    // The API server bumps the generation on a spec change; the planner's status reports it.
    gd.metadata.generation = Some(gd.metadata.generation.unwrap_or(1) + 1);
    Ok(said)
}

/// Reads what the operator's planner looks at for `name`: the GameDeployment, the pods its selector matches, the
/// ControllerRevisions it controls, its HookRuns, the namespace's HookTemplates and the nodes' deletion costs (if
/// nodes may be listed). Only get and list.
pub async fn read(target: &Target, name: &str) -> Result<Live, Error> {
    let gds: Api<GameDeployment> = target.api();
    let gd = gds
        .get_opt(name)
        .await?
        .ok_or_else(|| Error::NotFound { namespace: target.namespace.clone(), name: name.to_string() })?;
    let selected = ListParams::default().labels(&pod_selector(&gd));
    let runs = ListParams::default().labels(&run_selector(name));
    let all = ListParams::default();
    let (pod_api, revision_api, run_api, template_api) = (
        target.api::<Pod>(),
        target.api::<ControllerRevision>(),
        target.api::<HookRun>(),
        target.api::<HookTemplate>(),
    );
    let (pods, revisions, hook_runs, templates) = futures::try_join!(
        pod_api.list(&selected),
        revision_api.list(&selected),
        run_api.list(&runs),
        template_api.list(&all),
    )?;
    // The GameDeployment's revisions as the operator counts them (its own, and orphans given to it by name).
    let revisions = revisions
        .items
        .into_iter()
        .filter(|r| gamedeployment_operator::forecast::takeover::is_revision_of(r, &gd))
        .collect();
    // Node deletion costs order scale-in; without permission to list nodes the forecast goes without them.
    let nodes: Api<Node> = Api::all(target.client.clone());
    let node_costs = match nodes.list(&ListParams::default()).await {
        Ok(list) => list
            .items
            .iter()
            .filter_map(|n| {
                let cost = n.metadata.annotations.as_ref()?.get(common::keys::NODE_DELETION_COST)?;
                Some((n.metadata.name.clone()?, cost.trim().parse::<f64>().ok()?))
            })
            .collect(),
        Err(_) => BTreeMap::new(),
    };
    Ok(Live {
        gd,
        pods: pods.items.into_iter().map(common::cached_pod::Pod::from).collect(),
        revisions,
        hook_runs: hook_runs.items,
        hook_templates: templates.items,
        node_costs,
        now: Timestamp::now(),
    })
}

/// `1h2m3s`, `3m5s`, `45s`.
pub fn duration(seconds: i64) -> String {
    let s = seconds.max(0);
    let (h, m, s) = (s / 3600, s % 3600 / 60, s % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

fn hook_line(step: &PodStep) -> String {
    let hooks: Vec<String> = step
        .hooks
        .iter()
        .map(|h| {
            let ends = match (h.completes, h.outcome) {
                (None, _) => "never completes".to_string(),
                (Some(at), HookPhase::Successful) => format!("succeeds after {}", duration(at - h.starts)),
                (Some(at), phase) => format!("ends {phase} after {}", duration(at - h.starts)),
            };
            format!("{} hook {} ({}; {ends})", h.kind, h.template, h.schedule)
        })
        .collect();
    if hooks.is_empty() { "no hook".into() } else { format!("waits on {}", hooks.join(", then ")) }
}

/// The verdict `kubectl gd status` gives the rollout where the forecast stops ([`crate::rollout::State`], the one
/// model every view uses): a partition reached is complete (`PartitionAvailable`); a failed canary step hook that
/// holds is a failure, one that rolls back its own verdict; where the forecast only stops waiting (lifecycle
/// handlers, a stuck rollout, its time limit) `status` keeps waiting.
pub fn status_after(reason: StopReason) -> State {
    match reason {
        StopReason::Complete | StopReason::Partition => State::Complete,
        StopReason::Paused => State::Paused,
        StopReason::HookFailed => State::Failed,
        StopReason::RolledBack => State::RolledBack,
        StopReason::LifecycleHold | StopReason::Stuck | StopReason::TimeLimit => State::Progressing,
    }
}

/// `kubectl gd status then: RolledBack (exit 7)`, or that it keeps waiting.
fn status_after_line(timeline: &Timeline) -> String {
    let state = status_after(timeline.stop.reason);
    match state.exit_code() {
        Some(code) => format!("`kubectl gd status` then: {state:?} (exit {code})"),
        None => "`kubectl gd status` then keeps waiting (Progressing)".to_string(),
    }
}

/// The forecast as JSON: the timeline, and `status`: what `kubectl gd status` then says (`state`, `exitCode`).
pub fn json(timeline: &Timeline) -> serde_json::Value {
    let mut value = serde_json::to_value(timeline).unwrap_or_default();
    let state = status_after(timeline.stop.reason);
    if let Some(object) = value.as_object_mut() {
        object.insert("status".into(), serde_json::json!({"state": state, "exitCode": state.exit_code()}));
    }
    value
}

fn stop_line(timeline: &Timeline) -> String {
    let stop = &timeline.stop;
    let what = match stop.reason {
        StopReason::Complete => "the rollout is complete",
        StopReason::Partition => "the rollout stops at the partition",
        StopReason::Paused => "the rollout pauses",
        StopReason::HookFailed => "the rollout stops, a hook failed",
        StopReason::RolledBack => "the canary is rolled back (not complete)",
        StopReason::LifecycleHold => "the rollout waits for lifecycle handlers",
        StopReason::Stuck => "the rollout is stuck",
        StopReason::TimeLimit => "the forecast gives up",
    };
    format!("At {} {what}: {}", duration(stop.at), stop.message)
}

/// The forecast as text. `change` says what was changed.
pub fn render(timeline: &Timeline, change: &[String]) -> String {
    let mut out = String::new();
    let assume = match timeline.assume {
        Assume::Succeed => "hooks assumed to succeed",
        Assume::Fail => "hooks assumed to fail",
        Assume::AsNow => "hooks assumed to go on as they are now",
    };
    let _ = writeln!(
        out,
        "Plan for gamedeployment {}/{}: {} (update revision {}); {assume}",
        timeline.namespace,
        timeline.name,
        change.join(", "),
        timeline.update_revision.as_deref().unwrap_or("none")
    );
    let mut notes = timeline.notes.iter().peekable();
    for batch in &timeline.batches {
        while let Some(note) = notes.next_if(|n| n.at <= batch.starts) {
            let _ = writeln!(out, "\n  at {}: {}", duration(note.at), note_text(note));
        }
        let ends = batch.ends.map_or_else(|| "not done".to_string(), |e| format!("done at {}", duration(e)));
        let _ = writeln!(out, "\nBatch {} (starts at {}, {ends})", batch.index, duration(batch.starts));
        let width = batch.pods.iter().map(|p| p.pod.len()).max().unwrap_or(0);
        for step in &batch.pods {
            let acted = match step.acted {
                Some(_) => String::new(),
                None => " — not taken".into(),
            };
            let _ = writeln!(out, "  {:width$}  {:15}  {}{acted}", step.pod, step.action.as_str(), hook_line(step),);
        }
    }
    for note in notes {
        let _ = writeln!(out, "\n  at {}: {}", duration(note.at), note_text(note));
    }
    if let Some(race) = &timeline.race {
        out.push_str(&race_lines(race, timeline.assume));
    }
    if !timeline.lifecycle_holds.is_empty() {
        out.push_str(&hold_lines(&timeline.lifecycle_holds));
    }
    let pods: usize = timeline.batches.iter().map(|b| b.pods.len()).sum();
    let _ = writeln!(out, "\n{}", stop_line(timeline));
    // Rolled back, the pods counted as updated are those back on the stable revision.
    let then = match &timeline.rolled_back_to {
        Some(stable) => {
            format!("{}/{} back on the stable revision {stable}", timeline.after.updated, timeline.after.replicas)
        }
        None => format!("{}/{} updated", timeline.after.updated, timeline.after.replicas),
    };
    let _ = writeln!(
        out,
        "Estimated duration: {} ({} batch{}, {pods} pod{}); pods then {then}",
        duration(timeline.total_seconds),
        timeline.batches.len(),
        if timeline.batches.len() == 1 { "" } else { "es" },
        if pods == 1 { "" } else { "s" },
    );
    let _ = writeln!(out, "{}", status_after_line(timeline));
    out
}

fn names(pods: &[String]) -> String {
    if pods.is_empty() { "none".into() } else { pods.join(", ") }
}

/// The race to empty: its candidates in race order, each with how it ends and its hook, then the winners and the
/// skipped pods.
fn race_lines(race: &Race, assume: Assume) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nRace to empty ({} candidate{} in race order; {} win{}):",
        race.candidates.len(),
        if race.candidates.len() == 1 { "" } else { "s" },
        race.winners.len(),
        if race.winners.len() == 1 { "s" } else { "" },
    );
    let width = race.candidates.iter().map(|c| c.pod.len()).max().unwrap_or(0);
    for (i, c) in race.candidates.iter().enumerate() {
        let result = match c.decided {
            Some(at) => format!("{} at {}", c.result.as_str(), duration(at)),
            None => c.result.as_str().to_string(),
        };
        let hook = match (&c.run, c.outcome) {
            (Some(run), Some(outcome)) => format!("run {run}: {outcome:?}"),
            (Some(run), None) => format!("run {run}"),
            (None, _) => "no hook".into(),
        };
        let unknown = if assume == Assume::AsNow && c.run.is_some() && !c.measured {
            "; no measurement yet, assumed to succeed"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {:>2}. {:width$}  {result} ({hook}{unknown}; joined at {})",
            i + 1,
            c.pod,
            duration(c.joined)
        );
    }
    let _ = writeln!(out, "  Winners: {}", names(&race.winners));
    let _ = writeln!(out, "  Skipped: {}", names(&race.skipped));
    out
}

/// The pods lifecycle handlers hold, with what would release them.
fn hold_lines(holds: &[LifecycleHold]) -> String {
    let mut out = String::from("\nHeld by lifecycle handlers (only an outside controller releases them):\n");
    let width = holds.iter().map(|h| h.pod.len()).max().unwrap_or(0);
    for h in holds {
        let since = h.since.map_or_else(String::new, |s| format!(" (since {})", signed_duration(s)));
        let _ = writeln!(out, "  {:width$}  {:15}  {} handler: {}{since}", h.pod, h.state, h.handler, h.release);
    }
    out
}

/// [`duration`], or "before the change" for a negative time.
fn signed_duration(seconds: i64) -> String {
    if seconds < 0 { format!("{} before the change", duration(-seconds)) } else { duration(seconds) }
}

fn note_text(note: &gamedeployment_operator::forecast::Note) -> String {
    match &note.hook {
        Some(h) => format!(
            "{} ({}; {:?} after {})",
            note.text,
            h.schedule,
            h.outcome,
            h.completes.map_or("never".into(), |c| duration(c - h.starts))
        ),
        None => note.text.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gd() -> GameDeployment {
        serde_yaml::from_str(
            "metadata: {name: g, generation: 3}\nspec: {replicas: 5, selector: {matchLabels: {app: g}}, template: \
             {metadata: {labels: {app: g}}, spec: {containers: [{name: python, image: 'python:latest'}]}}}",
        )
        .unwrap()
    }

    #[test]
    fn changes_are_made_in_memory_and_bad_ones_refused() {
        let mut g = gd();
        let said = apply(
            &mut g,
            &Change {
                replicas: Some(3),
                images: vec![("python".into(), "python:3.5".into())],
                partition: Some("40%".into()),
                ..Change::default()
            },
        )
        .unwrap();
        assert_eq!(said, ["replicas 3", "image python=python:3.5", "partition 40%"]);
        assert_eq!(g.spec.replicas, Some(3));
        assert_eq!(g.spec.template.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("python:3.5"));
        assert_eq!(g.spec.update_strategy.partition, Some(IntOrString::String("40%".into())));
        assert_eq!(g.metadata.generation, Some(4));
        let bad = |c: Change| apply(&mut gd(), &c).unwrap_err();
        assert!(bad(Change::default()).contains("no change"));
        assert!(bad(Change { images: vec![("web".into(), "x".into())], ..Change::default() }).contains("python"));
        assert!(bad(Change { partition: Some("lots".into()), ..Change::default() }).contains("percentage"));
        let mut other = gd();
        other.metadata.name = Some("h".into());
        assert!(bad(Change { manifest: Some(other), ..Change::default() }).contains("not g"));
    }

    fn timeline(assume: Assume) -> Timeline {
        use gamedeployment_operator::forecast::{Counts, Stop};
        Timeline {
            name: "race".into(),
            namespace: "default".into(),
            assume,
            update_revision: Some("race-1".into()),
            rolled_back_to: None,
            batches: Vec::new(),
            notes: Vec::new(),
            race: None,
            lifecycle_holds: Vec::new(),
            stop: Stop { reason: StopReason::Complete, at: 12, message: "done".into() },
            total_seconds: 11,
            before: Counts::default(),
            after: Counts::default(),
            passes: 3,
        }
    }

    fn candidate(pod: &str, result: RaceResult, outcome: HookPhase, measured: bool) -> RaceCandidate {
        RaceCandidate {
            pod: pod.into(),
            joined: 1,
            result,
            decided: Some(11),
            run: Some(format!("predelete-race-1-{pod}-empty")),
            outcome: Some(outcome),
            measured,
        }
    }

    use gamedeployment_operator::forecast::{RaceCandidate, RaceResult};

    #[test]
    fn the_race_is_shown_in_race_order_with_winners_and_skipped_pods() {
        let mut t = timeline(Assume::AsNow);
        t.race = Some(Race {
            candidates: vec![
                candidate("race-b", RaceResult::Won, HookPhase::Successful, true),
                candidate("race-a", RaceResult::Skipped, HookPhase::Failed, true),
                candidate("race-c", RaceResult::Released, HookPhase::Successful, false),
            ],
            winners: vec!["race-b".into()],
            skipped: vec!["race-a".into()],
        });
        let text = render(&t, &["replicas 9".into()]);
        println!("{text}");
        let lines: Vec<&str> = text.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with("Race to empty (3 candidates in race order; 1 wins)"))
            .expect("header");
        assert!(lines[at + 1].contains("1. race-b") && lines[at + 1].contains("wins (deleted) at 11s"), "{text}");
        assert!(lines[at + 1].contains("run predelete-race-1-race-b-empty: Successful"), "{text}");
        assert!(lines[at + 2].contains("2. race-a") && lines[at + 2].contains("skipped (its hook failed)"), "{text}");
        assert!(lines[at + 3].contains("3. race-c") && lines[at + 3].contains("released"), "{text}");
        assert!(lines[at + 3].contains("no measurement yet, assumed to succeed"), "as-now cannot know: {text}");
        assert!(!lines[at + 1].contains("no measurement"), "{text}");
        assert_eq!(lines[at + 4], "  Winners: race-b");
        assert_eq!(lines[at + 5], "  Skipped: race-a");
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["race"]["winners"], serde_json::json!(["race-b"]));
        assert_eq!(json["race"]["skipped"], serde_json::json!(["race-a"]));
        assert_eq!(json["race"]["candidates"][0]["result"], "won");
        assert_eq!(json["race"]["candidates"][2]["measured"], false);
        // Assuming success, nothing is unknown.
        let mut succeed = t.clone();
        succeed.assume = Assume::Succeed;
        assert!(!render(&succeed, &[]).contains("no measurement"));
    }

    #[test]
    fn lifecycle_holds_are_listed_with_what_releases_them_and_the_stop_says_the_rollout_waits() {
        let mut t = timeline(Assume::Succeed);
        t.lifecycle_holds = vec![LifecycleHold {
            pod: "race-a".into(),
            state: "PreparingDelete".into(),
            handler: "preDelete".into(),
            release: "an outside controller must remove label example.com/hold=true from the pod".into(),
            since: Some(1),
        }];
        t.stop = gamedeployment_operator::forecast::Stop {
            reason: StopReason::LifecycleHold,
            at: 2,
            message: "pod race-a in PreparingDelete waits for the preDelete lifecycle handler: …".into(),
        };
        let text = render(&t, &[]);
        println!("{text}");
        assert!(text.contains("Held by lifecycle handlers"), "{text}");
        assert!(
            text.contains(
                "race-a  PreparingDelete  preDelete handler: an outside controller must remove label \
                 example.com/hold=true from the pod (since 1s)"
            ),
            "{text}"
        );
        assert!(
            text.contains("At 2s the rollout waits for lifecycle handlers: pod race-a in PreparingDelete"),
            "{text}"
        );
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["lifecycleHolds"][0]["handler"], "preDelete");
        assert_eq!(json["stop"]["reason"], "lifecycle-hold");
        assert!(json.get("race").is_none());
    }

    /// Issue 49, finding 2: a rolled-back canary is its own verdict in the plan — the stop line, the pods "back on
    /// the stable revision" (not "4/4 updated"), the header's revision the change's, JSON `stop.reason` and `status`
    /// — the same verdict and exit code `kubectl gd status` gives that state.
    #[test]
    fn a_rolled_back_canary_is_its_own_verdict_with_the_status_exit_code() {
        let mut t = timeline(Assume::Fail);
        t.update_revision = Some("race-2".into());
        t.rolled_back_to = Some("race-1".into());
        t.after = gamedeployment_operator::forecast::Counts { replicas: 4, updated: 4, ready: 4, available: 4 };
        t.stop = gamedeployment_operator::forecast::Stop {
            reason: StopReason::RolledBack,
            at: 31,
            message: "HookRun canary-race-2-1-check of canary step 2 of 2 ended Failed (hookPolicy.onFailure: \
                      Rollback): …"
                .into(),
        };
        let text = render(&t, &["image python=python:3.5".into()]);
        println!("{text}");
        assert!(text.contains("(update revision race-2)"), "{text}");
        assert!(text.contains("At 31s the canary is rolled back (not complete): HookRun"), "{text}");
        assert!(!text.contains("complete:"), "{text}");
        assert!(text.contains("pods then 4/4 back on the stable revision race-1\n"), "{text}");
        assert!(text.contains("`kubectl gd status` then: RolledBack (exit 7)\n"), "{text}");
        let json = json(&t);
        assert_eq!(json["stop"]["reason"], "rolled-back");
        assert_eq!(json["rolledBackTo"], "race-1");
        assert_eq!(json["status"], serde_json::json!({"state": "RolledBack", "exitCode": 7}));
        // Every stop reason maps to the verdict `status` gives.
        assert_eq!(status_after(StopReason::Partition).exit_code(), Some(0));
        assert_eq!(status_after(StopReason::HookFailed).exit_code(), Some(1));
        assert_eq!(status_after(StopReason::Stuck).exit_code(), None);
    }

    #[test]
    fn durations_read_as_kubectl_writes_them() {
        assert_eq!(duration(45), "45s");
        assert_eq!(duration(185), "3m5s");
        assert_eq!(duration(3725), "1h2m5s");
    }
}
