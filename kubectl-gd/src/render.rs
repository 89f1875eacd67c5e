//! Text for a [`Tree`]: plain (ASCII, no escape sequences: logs, pipes, the golden test) or for a terminal
//! (colour, symbols, box-drawing characters). Pure: a tree in, a string out.

use std::fmt::Write;

use common::api::HookPhase;

use crate::rollout::State;
use crate::tree::{MetricNode, PodNode, Revision, Run, Tree};

/// How to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    /// ANSI colours, symbols and box-drawing characters (a terminal); otherwise plain ASCII.
    pub terminal: bool,
}

impl Style {
    /// ASCII without escape sequences: logs, pipes, `NO_COLOR`, the golden test.
    pub const PLAIN: Self = Self { terminal: false };
    /// Colours, symbols and box drawing, for a terminal.
    pub const TERMINAL: Self = Self { terminal: true };

    fn paint(self, colour: Colour, text: &str) -> String {
        if !self.terminal {
            return text.to_string();
        }
        let code = match colour {
            Colour::Green => "32",
            Colour::Yellow => "33",
            Colour::Red => "31",
            Colour::Cyan => "36",
            Colour::Dim => "2",
            Colour::Bold => "1",
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    }

    /// `symbol text` on a terminal, `text` otherwise.
    fn badge(self, symbol: &str, colour: Colour, text: &str) -> String {
        if self.terminal { self.paint(colour, &format!("{symbol} {text}")) } else { text.to_string() }
    }

    fn branch(self, last: bool) -> &'static str {
        match (self.terminal, last) {
            (true, false) => "├── ",
            (true, true) => "└── ",
            (false, false) => "|-- ",
            (false, true) => "`-- ",
        }
    }

    fn stem(self, last: bool) -> &'static str {
        match (self.terminal, last) {
            (true, false) => "│   ",
            (false, false) => "|   ",
            (_, true) => "    ",
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Colour {
    Green,
    Yellow,
    Red,
    Cyan,
    Dim,
    Bold,
}

/// `45s`, `3m12s`, `2h05m`, `3d04h`: short, like kubectl's AGE column but exact below an hour.
pub fn human(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 if s % 60 == 0 => format!("{}m", s / 60),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86400, (s % 86400) / 3600),
    }
}

fn state_badge(style: Style, state: State) -> String {
    match state {
        State::Complete => style.badge("✔", Colour::Green, "Complete"),
        State::Progressing => style.badge("◌", Colour::Yellow, "Progressing"),
        State::Paused => style.badge("॥", Colour::Cyan, "Paused"),
        State::Failed => style.badge("✖", Colour::Red, "Failed"),
        State::Stalled => style.badge("⧗", Colour::Red, "Stalled"),
        State::RolledBack => style.badge("↩", Colour::Red, "RolledBack"),
    }
}

fn phase_badge(style: Style, phase: HookPhase) -> String {
    match phase {
        HookPhase::Successful => style.badge("✔", Colour::Green, phase.as_str()),
        HookPhase::Running => style.badge("◌", Colour::Yellow, phase.as_str()),
        HookPhase::Pending => style.badge("…", Colour::Dim, phase.as_str()),
        HookPhase::Failed => style.badge("✖", Colour::Red, phase.as_str()),
        HookPhase::Error => style.badge("⚠", Colour::Red, phase.as_str()),
        HookPhase::Inconclusive => style.badge("?", Colour::Yellow, phase.as_str()),
    }
}

/// Renders the whole view: a header of key facts, then the tree.
pub fn render(tree: &Tree, style: Style) -> String {
    let mut out = String::new();
    let field = |out: &mut String, key: &str, value: &str| {
        let _ = writeln!(out, "{:<11}{value}", format!("{key}:"));
    };
    field(&mut out, "Name", &style.paint(Colour::Bold, &tree.name));
    field(&mut out, "Namespace", &tree.namespace);
    field(&mut out, "Status", &format!("{}: {}", state_badge(style, tree.verdict.state), tree.verdict.message));
    for wait in &tree.verdict.waits {
        field(&mut out, "Waiting", &wait_text(wait));
    }
    let s = &tree.strategy;
    let mut strategy = s.type_.clone();
    let knobs: Vec<String> =
        [("partition", &s.partition), ("maxUnavailable", &s.max_unavailable), ("maxSurge", &s.max_surge)]
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k} {v}")))
            .collect();
    if !knobs.is_empty() {
        strategy = format!("{strategy} ({})", knobs.join(", "));
    }
    field(&mut out, "Strategy", &strategy);
    field(&mut out, "Paused", if s.paused { "true" } else { "false" });
    field(&mut out, "Hooks", &if s.hooks.is_empty() { "none".to_string() } else { s.hooks.join(", ") });
    let p = &tree.progress;
    // The expectation is shown when a partition keeps pods back (it is `desired` otherwise). Updated pods are
    // counted out of the desired count while that many exist; while pods are added or removed (a surge, a scale),
    // out of those that exist — never "6/5".
    let mut notes = Vec::new();
    if p.total != p.desired {
        notes.push(format!("desired {}", p.desired));
    }
    if p.expected_updated != p.desired {
        notes.push(format!("expected {}", p.expected_updated));
    }
    let notes = if notes.is_empty() { String::new() } else { format!(" ({})", notes.join(", ")) };
    let updated = if p.total == p.desired {
        format!("updated {}/{}{notes}", p.updated, p.desired)
    } else {
        format!("updated {} of {} pods{notes}", p.updated, p.total)
    };
    let mut progress = format!(
        "{updated}, updated ready {}, updated available {}, ready {}, available {}, total {}",
        p.updated_ready, p.updated_available, p.ready, p.available, p.total
    );
    if p.stale {
        progress.push_str(" (the operator has not observed the latest spec yet)");
    }
    field(&mut out, "Progress", &progress);
    if !p.server_states.is_empty() {
        let states: Vec<String> = p.server_states.iter().map(|(state, n)| format!("{n} {state}")).collect();
        field(&mut out, "Servers", &states.join(", "));
    }
    if let Some(latest) = p.shadow_results.last() {
        let ok = p.shadow_results.iter().filter(|r| r.phase == common::api::HookPhase::Successful).count();
        let why = latest.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
        let subject = match latest.canary_step {
            Some(index) => format!("canary step {}", index + 1),
            None => format!("pod {}", latest.pod_name),
        };
        let shadow = format!(
            "{} results, {ok} successful; latest: {} {} hook {} on {subject} ended {} (real gate: {}){why}",
            p.shadow_results.len(),
            latest.hook,
            latest.template_name,
            latest.hook_run,
            latest.phase,
            latest.gate
        );
        field(&mut out, "Shadow", &shadow);
    }
    if let Some(c) = &tree.canary {
        let position = if c.step as usize >= c.steps {
            format!("all {} steps done", c.steps)
        } else {
            format!("step {} of {}: {}", c.step + 1, c.steps, c.current)
        };
        let paused = c.pause_reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
        field(&mut out, "Canary", &format!("{position}{paused}"));
    }
    // The operator's own words, unless the status line above already says exactly that.
    if let Some(c) = tree.progressing.as_ref().filter(|c| c.message.as_deref() != Some(tree.verdict.message.as_str())) {
        let reason = c.reason.as_deref().unwrap_or("");
        let message = c.message.as_deref().unwrap_or("");
        field(&mut out, "Operator", &format!("{reason}: {message}"));
    }
    out.push('\n');

    let _ = writeln!(out, "{}", style.paint(Colour::Bold, &format!("gamedeployment/{}", tree.name)));
    // Children of the GameDeployment: the canary step's run, then the revisions.
    let step_run = tree.canary.as_ref().and_then(|c| c.step_run.as_ref());
    let n = usize::from(step_run.is_some()) + tree.revisions.len();
    if let Some(run) = step_run {
        run_lines(&mut out, style, run, "", n == 1, "step hookrun");
    }
    for (i, revision) in tree.revisions.iter().enumerate() {
        revision_lines(&mut out, style, revision, "", i + 1 == tree.revisions.len());
    }
    out
}

/// "the pause of canary step 2 of 3 (60s) until 2024-05-01T10:11:00Z (in 1m)".
pub fn wait_text(wait: &crate::rollout::Wait) -> String {
    let when = if wait.remaining_seconds >= 0 {
        format!("in {}", human(wait.remaining_seconds))
    } else {
        format!("{} ago", human(-wait.remaining_seconds))
    };
    format!("{} until {} ({when})", wait.what, wait.until.0)
}

fn revision_lines(out: &mut String, style: Style, revision: &Revision, prefix: &str, last: bool) {
    let mut tags = Vec::new();
    if revision.update {
        tags.push("update");
    }
    if revision.current {
        tags.push("current");
    }
    let number = revision.number.map(|n| format!("revision:{n} ")).unwrap_or_else(|| "revision ".to_string());
    let tags = if tags.is_empty() { String::new() } else { format!("  {}", tags.join(", ")) };
    let pods = match revision.pods.len() {
        0 => "  no pods".to_string(),
        1 => "  1 pod".to_string(),
        n => format!("  {n} pods"),
    };
    let _ = writeln!(
        out,
        "{prefix}{}{number}{}{}{}",
        style.branch(last),
        revision.name,
        style.paint(Colour::Cyan, &tags),
        style.paint(Colour::Dim, &pods)
    );
    let inner = format!("{prefix}{}", style.stem(last));
    let n = revision.pods.len();
    for (i, pod) in revision.pods.iter().enumerate() {
        pod_lines(out, style, pod, &inner, i + 1 == n);
    }
}

fn pod_lines(out: &mut String, style: Style, pod: &PodNode, prefix: &str, last: bool) {
    let ready = if pod.ready {
        style.badge("✔", Colour::Green, "ready")
    } else {
        style.badge("◌", Colour::Yellow, "not ready")
    };
    let state = match (&pod.state_seconds, pod.state.as_str()) {
        (_, "Normal") => pod.state.clone(),
        (Some(s), state) => format!("{state} for {}", human(*s)),
        (None, state) => state.to_string(),
    };
    let state = if pod.is_held() { style.paint(Colour::Yellow, &state) } else { state };
    let restarts = if pod.restarts > 0 { format!("  restarts {}", pod.restarts) } else { String::new() };
    let server = pod.server_state.as_ref().map(|s| format!("  server {s}")).unwrap_or_default();
    let _ = writeln!(
        out,
        "{prefix}{}pod {}  {}  {ready}  {state}{server}  age {}{restarts}",
        style.branch(last),
        pod.name,
        pod.phase,
        human(pod.age_seconds)
    );
    let inner = format!("{prefix}{}", style.stem(last));
    // Why the GameDeployment holds the pod, when no HookRun of it says more (e.g. the template is missing).
    let held_without_run =
        pod.held.as_ref().filter(|h| h.hook_run.as_ref().is_none_or(|name| pod.runs.iter().all(|r| &r.name != name)));
    let n = pod.runs.len() + usize::from(held_without_run.is_some());
    let mut i = 0;
    if let Some(held) = held_without_run {
        i += 1;
        let _ = writeln!(
            out,
            "{inner}{}held by {} gate: {} for {}: {}",
            style.branch(i == n),
            held.gate,
            phase_badge(style, held.phase),
            human(held.seconds),
            held.message.as_deref().unwrap_or("")
        );
    }
    for run in &pod.runs {
        i += 1;
        run_lines(out, style, run, &inner, i == n, "hookrun");
    }
}

fn run_lines(out: &mut String, style: Style, run: &Run, prefix: &str, last: bool, noun: &str) {
    let kind = run.kind.as_deref().map(|k| format!("  {k}")).unwrap_or_default();
    let elapsed = if run.phase.is_completed() { "took" } else { "elapsed" };
    let terminated = if run.terminated { "  (terminate requested)" } else { "" };
    let _ = writeln!(
        out,
        "{prefix}{}{noun} {}{kind}  {}  {elapsed} {}{terminated}",
        style.branch(last),
        run.name,
        phase_badge(style, run.phase),
        human(run.elapsed_seconds)
    );
    let inner = format!("{prefix}{}", style.stem(last));
    let detail = |out: &mut String, text: &str| {
        let _ = writeln!(out, "{inner}{}{text}", if run.metrics.is_empty() { "" } else { style.stem(false) });
    };
    if let Some(m) = run.message.as_deref().filter(|m| !m.is_empty()) {
        detail(out, &format!("message: {m}"));
    }
    let n = run.metrics.len();
    for (i, metric) in run.metrics.iter().enumerate() {
        metric_lines(out, style, metric, &inner, i + 1 == n);
    }
}

fn metric_lines(out: &mut String, style: Style, metric: &MetricNode, prefix: &str, last: bool) {
    let of = metric.count.map(|c| format!("/{c}")).unwrap_or_default();
    let mut tally = vec![format!("{}{of} measured", metric.measured)];
    for (n, word) in [
        (metric.successful, "successful"),
        (metric.failed, "failed"),
        (metric.inconclusive, "inconclusive"),
        (metric.error, "errors"),
    ] {
        if n > 0 {
            tally.push(format!("{n} {word}"));
        }
    }
    let _ = writeln!(
        out,
        "{prefix}{}metric {}  {}  {}",
        style.branch(last),
        metric.name,
        phase_badge(style, metric.phase),
        tally.join(", ")
    );
    let inner = format!("{prefix}{}", style.stem(last));
    if let Some(m) = &metric.last {
        let value = m.value.as_deref().map(|v| format!("value {v}, ")).unwrap_or_else(|| "no value, ".to_string());
        let ago = m.ago_seconds.map(|s| format!(", {} ago", human(s))).unwrap_or_default();
        let message = m.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
        let _ = writeln!(out, "{inner}last:      {value}{}{ago}{message}", phase_badge(style, m.phase));
    } else {
        let _ = writeln!(out, "{inner}last:      {}", style.paint(Colour::Dim, "no measurement yet"));
    }
    let _ = writeln!(out, "{inner}judged by: {}", metric.judged_by.join("; "));
    if let Some(m) = metric.message.as_deref().filter(|m| !m.is_empty()) {
        let _ = writeln!(out, "{inner}message:   {m}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_short_and_exact_below_an_hour() {
        assert_eq!(human(-3), "0s");
        assert_eq!(human(45), "45s");
        assert_eq!(human(120), "2m");
        assert_eq!(human(192), "3m12s");
        assert_eq!(human(7500), "2h05m");
        assert_eq!(human(3 * 86400 + 4 * 3600 + 5), "3d04h");
    }

    #[test]
    fn plain_style_has_no_escape_sequences_and_terminal_style_has_colour() {
        assert_eq!(Style::PLAIN.badge("✔", Colour::Green, "ready"), "ready");
        assert_eq!(Style::TERMINAL.badge("✔", Colour::Green, "ready"), "\x1b[32m✔ ready\x1b[0m");
        assert_eq!(Style::PLAIN.branch(true), "`-- ");
        assert_eq!(Style::TERMINAL.branch(false), "├── ");
    }
}
