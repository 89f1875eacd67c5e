//! The chart's Grafana dashboard (`dashboards/gamedeployment-operators.json`) and alerting rules
//! (`alerts/rules.yaml`) are valid, and every metric and label they use is listed in
//! `charts/gamedeployment-operators/metrics-used.txt` — the list the end-to-end scrape check compares with what the
//! operators export. `UPDATE_GOLDEN=1 cargo test -p kubectl-gd --test integration -- chart_observability::` rewrites the list after an
//! intended change of the dashboard or the rules.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;

fn chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/gamedeployment-operators")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(chart().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Metrics the operators export (README "Metrics", plus the per-GameDeployment gauges, the gate wait histogram,
/// the hook outcome counter and the leader gauges the dashboard needs). A name used by the dashboard or the
/// alerts that is not here is a typo or a metric nobody exports.
const EXPORTED: &[&str] = &[
    "gamedeployment_desired_replicas",
    "gamedeployment_updated_replicas",
    "gamedeployment_ready_replicas",
    "gamedeployment_rollout_stuck_seconds",
    "gamedeployment_progress_deadline_exceeded",
    "gamedeployment_pods_held",
    "gamedeployment_server_states",
    "gamedeployment_leader",
    "gamedeployment_gate_wait_seconds",
    "gamedeployment_hook_outcomes_total",
    "gamedeployment_reconcile_errors_total",
    "gamedeployment_reconciles_total",
    "hook_operator_hookruns",
    "hook_operator_measurements_total",
    "hook_operator_measurement_duration_seconds",
    "hook_operator_reconcile_errors_total",
    "hook_operator_leader",
];

/// Renders the rules the way `templates/prometheusrule.yaml` does with `tpl`, for the only two template forms the
/// file may use: `{{ .Values.prometheusRule.KEY }}` and raw strings {{`...`}}. Anything else fails the test, so the
/// file cannot grow a construct this check does not understand.
fn render_rules(text: &str, values: &serde_yaml::Value) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        if let Some(raw) = after.strip_prefix('`') {
            let end = raw.find("`}}").expect("a raw string {{`...`}} is closed");
            out.push_str(&raw[..end]);
            rest = &raw[end + 3..];
        } else {
            let end = after.find("}}").expect("{{ is closed");
            let expression = after[..end].trim();
            let key = expression
                .strip_prefix(".Values.prometheusRule.")
                .unwrap_or_else(|| panic!("unsupported template in alerts/rules.yaml: {{{{ {expression} }}}}"));
            let value = &values["prometheusRule"][key];
            let value = match value {
                serde_yaml::Value::String(s) => s.clone(),
                serde_yaml::Value::Number(n) => n.to_string(),
                other => panic!("prometheusRule.{key} is not a scalar in values.yaml: {other:?}"),
            };
            out.push_str(&value);
            rest = &after[end + 2..];
        }
    }
    out.push_str(rest);
    out
}

const KEYWORDS: &[&str] =
    &["by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"];

/// Metric names (ours: `gamedeployment_*`, `hook_operator_*`) and the labels a PromQL expression uses: label
/// matchers, `by`/`without`/`on`/`ignoring` lists and `label_values(metric, label)`. Labels of a grouping clause
/// belong to every metric of the expression.
fn promql_uses(expr: &str) -> BTreeMap<String, BTreeSet<String>> {
    let chars: Vec<char> = expr.chars().collect();
    let mut metrics: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut shared: BTreeSet<String> = BTreeSet::new();
    let mut i = 0;
    let ident = |i: &mut usize| {
        let start = *i;
        while *i < chars.len() && (chars[*i].is_ascii_alphanumeric() || chars[*i] == '_' || chars[*i] == ':') {
            *i += 1;
        }
        chars[start..*i].iter().collect::<String>()
    };
    let skip_ws = |i: &mut usize| {
        while *i < chars.len() && chars[*i].is_whitespace() {
            *i += 1;
        }
    };
    let list = |i: &mut usize, into: &mut BTreeSet<String>| {
        // At `(`: a comma-separated label list.
        *i += 1;
        while *i < chars.len() && chars[*i] != ')' {
            skip_ws(i);
            let name = ident(i);
            if !name.is_empty() {
                into.insert(name);
            } else {
                *i += 1;
            }
        }
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '[' {
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == '$' {
            if c == '$' {
                i += 1;
            }
            let word = ident(&mut i);
            let mut j = i;
            skip_ws(&mut j);
            let next = chars.get(j).copied();
            if KEYWORDS.contains(&word.as_str()) {
                if next == Some('(') && !matches!(word.as_str(), "bool" | "and" | "or" | "unless" | "offset") {
                    i = j;
                    list(&mut i, &mut shared);
                }
            } else if word == "label_values" && next == Some('(') {
                // label_values(metric{...}, label): the last argument is a label.
                let close = chars[j..].iter().position(|&c| c == ')').map(|p| j + p).expect("label_values closes");
                let args: String = chars[j + 1..close].iter().collect();
                if let Some((_, label)) = args.rsplit_once(',') {
                    shared.insert(label.trim().to_string());
                }
            } else if (word.starts_with("gamedeployment_") || word.starts_with("hook_operator_")) && next != Some('(') {
                let labels = metrics.entry(word).or_default();
                if next == Some('{') {
                    i = j + 1;
                    while i < chars.len() && chars[i] != '}' {
                        skip_ws(&mut i);
                        let name = ident(&mut i);
                        if !name.is_empty() {
                            labels.insert(name);
                        }
                        // Skip the operator and the quoted value.
                        while i < chars.len() && chars[i] != '"' && chars[i] != '}' {
                            i += 1;
                        }
                        if i < chars.len() && chars[i] == '"' {
                            i += 1;
                            while i < chars.len() && chars[i] != '"' {
                                i += if chars[i] == '\\' { 2 } else { 1 };
                            }
                            i += 1;
                        }
                        while i < chars.len() && (chars[i] == ',' || chars[i].is_whitespace()) {
                            i += 1;
                        }
                    }
                }
            }
        } else {
            i += 1;
        }
    }
    for labels in metrics.values_mut() {
        labels.extend(shared.iter().cloned());
    }
    metrics
}

/// Labels a legend or an annotation refers to: `{{label}}` (Grafana) and `$labels.label` (Prometheus).
fn template_labels(text: &str) -> BTreeSet<String> {
    let mut labels = BTreeSet::new();
    for part in text.split("{{").skip(1) {
        let inner = part.split("}}").next().unwrap_or("").trim();
        if !inner.is_empty() && inner.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            labels.insert(inner.to_string());
        }
    }
    for part in text.split("$labels.").skip(1) {
        let name: String = part.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        labels.insert(name);
    }
    labels
}

fn merge(
    into: &mut BTreeMap<String, BTreeSet<String>>,
    from: BTreeMap<String, BTreeSet<String>>,
    extra: &BTreeSet<String>,
) {
    for (metric, labels) in from {
        let entry = into.entry(metric).or_default();
        entry.extend(labels);
        entry.extend(extra.iter().cloned());
    }
}

fn dashboard_uses() -> BTreeMap<String, BTreeSet<String>> {
    let dashboard: Value = serde_json::from_str(&read("dashboards/gamedeployment-operators.json")).expect("valid JSON");
    assert!(dashboard["uid"].is_string() && dashboard["title"].is_string());
    let variables = dashboard["templating"]["list"].as_array().expect("templating variables");
    let names: Vec<&str> = variables.iter().filter_map(|v| v["name"].as_str()).collect();
    assert_eq!(names, ["datasource", "namespace", "name"]);
    let mut uses = BTreeMap::new();
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        merge(&mut uses, promql_uses(variable["definition"].as_str().expect("query definition")), &BTreeSet::new());
    }
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    let mut queries = 0;
    for panel in panels {
        assert!(ids.insert(panel["id"].as_i64().expect("panel id")), "duplicate panel id: {panel}");
        let grid = &panel["gridPos"];
        assert!(grid["w"].as_i64().is_some_and(|w| w > 0 && w <= 24), "{panel}");
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{}", panel["title"]);
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            let used = promql_uses(expr);
            assert!(!used.is_empty(), "{} queries none of the operators' metrics: {expr}", panel["title"]);
            merge(&mut uses, used, &template_labels(target["legendFormat"].as_str().unwrap_or("")));
            queries += 1;
        }
    }
    assert!(queries >= 10, "{queries} queries");
    uses
}

fn rules_uses() -> BTreeMap<String, BTreeSet<String>> {
    let values: serde_yaml::Value = serde_yaml::from_str(&read("values.yaml")).expect("values.yaml");
    let rendered = render_rules(&read("alerts/rules.yaml"), &values);
    let rules: serde_yaml::Value = serde_yaml::from_str(&rendered).unwrap_or_else(|e| panic!("{e}\n{rendered}"));
    let groups = rules["groups"].as_sequence().expect("groups");
    let mut uses = BTreeMap::new();
    let mut alerts = BTreeSet::new();
    for group in groups {
        assert!(group["name"].is_string());
        for rule in group["rules"].as_sequence().expect("rules") {
            let alert = rule["alert"].as_str().expect("every rule is an alert").to_string();
            assert!(alerts.insert(alert.clone()), "duplicate alert {alert}");
            let expr = rule["expr"].as_str().expect("expr");
            assert!(!expr.contains("{{") && !expr.contains(".Values"), "unrendered: {expr}");
            if let Some(duration) = rule["for"].as_str() {
                assert!(duration.ends_with('m') || duration.ends_with('s'), "{alert}: for {duration}");
            }
            assert!(rule["labels"]["severity"].is_string(), "{alert}");
            let summary = rule["annotations"]["summary"].as_str().expect("summary");
            let description = rule["annotations"]["description"].as_str().expect("description");
            let used = promql_uses(expr);
            assert!(!used.is_empty(), "{alert} uses none of the operators' metrics");
            let mut referenced = template_labels(summary);
            referenced.extend(template_labels(description));
            referenced.remove("");
            merge(&mut uses, used, &referenced);
        }
    }
    let expected = [
        "GameDeploymentRolloutStuck",
        "GameDeploymentProgressDeadlineExceeded",
        "GameDeploymentHookFailureRate",
        "GameDeploymentPodsHeldTooLong",
        "GameDeploymentServersInMaintenance",
        "GameDeploymentOperatorNotLeading",
        "HookOperatorNotLeading",
        "GameDeploymentReconcileErrors",
        "HookOperatorReconcileErrors",
    ];
    assert_eq!(alerts, expected.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>());
    uses
}

#[test]
fn rules_render_with_the_values_thresholds() {
    let values: serde_yaml::Value = serde_yaml::from_str(&read("values.yaml")).unwrap();
    let rendered = render_rules(&read("alerts/rules.yaml"), &values);
    assert!(rendered.contains("gamedeployment_rollout_stuck_seconds) > 15 * 60"), "{rendered}");
    assert!(rendered.contains("min_over_time(gamedeployment_pods_held[15m]) > 0"), "{rendered}");
    assert!(rendered.contains("hook for over 15 minutes"), "{rendered}");
    assert!(
        rendered.contains(r#"min_over_time(gamedeployment_server_states{state="Maintaining"}[24h]) > 0"#),
        "{rendered}"
    );
    assert!(rendered.contains("{{ $labels.name }}"), "Prometheus templates pass through: {rendered}");
}

#[test]
fn promql_parsing_finds_metrics_and_labels() {
    let uses = promql_uses(
        r#"histogram_quantile(0.95, sum by (le, hook) (rate(gamedeployment_gate_wait_seconds_bucket{hook!="x", a=~"b,c"}[5m])))"#,
    );
    let labels: Vec<&str> = uses["gamedeployment_gate_wait_seconds_bucket"].iter().map(String::as_str).collect();
    assert_eq!(labels, ["a", "hook", "le"]);
    assert_eq!(
        template_labels("{{namespace}}/{{name}} p95 {{ $labels.hook }}"),
        ["hook", "name", "namespace"].map(String::from).into()
    );
}

#[test]
fn dashboard_and_alerts_use_only_exported_metrics_and_the_list_is_current() {
    let mut uses = dashboard_uses();
    for (metric, labels) in rules_uses() {
        uses.entry(metric).or_default().extend(labels);
    }
    for metric in uses.keys() {
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| metric.strip_suffix(s).filter(|b| EXPORTED.contains(b)))
            .unwrap_or(metric);
        assert!(EXPORTED.contains(&base), "{metric} is used but not exported by the operators");
    }
    let list: String = uses
        .iter()
        .map(|(metric, labels)| {
            let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
            if labels.is_empty() { format!("{metric}\n") } else { format!("{metric} {}\n", labels.join(",")) }
        })
        .collect();
    let list = format!(
        "# Metrics and labels used by dashboards/gamedeployment-operators.json and alerts/rules.yaml: `metric labels`.\n\
         # Generated and checked by kubectl-gd/tests/chart_observability.rs; the e2e scrape check compares it with\n\
         # what the operators export.\n{list}"
    );
    let path = chart().join("metrics-used.txt");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &list).unwrap();
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(current == list, "{} is stale (UPDATE_GOLDEN=1 rewrites it):\n{list}", path.display());
}
