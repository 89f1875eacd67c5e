//! The chart's optional Grafana dashboard ConfigMap and PrometheusRule: off by default, rendered and linted when
//! enabled, the dashboard byte-for-byte the chart's JSON with the Grafana sidecar label, the rules with the values'
//! thresholds. (Their content — valid JSON/YAML, the metrics and labels used — is checked by
//! `kubectl-gd/tests/chart_observability.rs`.)

use e2e::helm;
use serde_json::{Value, json};

const CHART: &str = "charts/gamedeployment-operators";

async fn render(values: Value) -> Vec<Value> {
    let out = helm(&["render", CHART, "--values", &values.to_string()]).await;
    serde_json::from_str(&out).expect("rendered JSON")
}

#[tokio::test]
async fn dashboard_and_rules_are_optional_and_render_when_enabled() {
    let docs = render(json!({})).await;
    assert!(!docs.iter().any(|d| d["kind"] == "PrometheusRule" || d["kind"] == "ConfigMap"), "off by default");

    let enabled = json!({
        "dashboards": {"enabled": true, "annotations": {"grafana_folder": "GameDeployments"}},
        "prometheusRule": {"enabled": true, "labels": {"release": "prometheus"}, "podHeldMinutes": 30}
    });
    helm(&["lint", CHART, "--values", &enabled.to_string()]).await;
    let docs = render(enabled).await;
    let dashboard = docs.iter().find(|d| d["kind"] == "ConfigMap").expect("the dashboard ConfigMap");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(dashboard["metadata"]["annotations"]["grafana_folder"], "GameDeployments");
    let shipped =
        std::fs::read_to_string(e2e::repo_root().join(CHART).join("dashboards/gamedeployment-operators.json"))
            .expect("dashboard file");
    let data = dashboard["data"]["gamedeployment-operators.json"].as_str().expect("dashboard data");
    assert_eq!(data.trim_end(), shipped.trim_end(), "the ConfigMap carries the chart's dashboard unchanged");
    let parsed: Value = serde_json::from_str(data).expect("valid JSON");
    assert_eq!(parsed["uid"], "gamedeployment-operators");

    let rule = docs.iter().find(|d| d["kind"] == "PrometheusRule").expect("the PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    let rules = rule["spec"]["groups"][0]["rules"].as_array().expect("rules");
    let held = rules.iter().find(|r| r["alert"] == "GameDeploymentPodsHeldTooLong").expect("held alert");
    assert_eq!(held["expr"], "min_over_time(gamedeployment_pods_held[30m]) > 0");
    assert!(held["annotations"]["summary"].as_str().unwrap().contains("{{ $labels.name }}"));
    assert!(held["annotations"]["summary"].as_str().unwrap().contains("for over 30 minutes"));
    let maintaining =
        rules.iter().find(|r| r["alert"] == "GameDeploymentServersInMaintenance").expect("maintenance alert");
    assert_eq!(maintaining["expr"], r#"min_over_time(gamedeployment_server_states{state="Maintaining"}[24h]) > 0"#);
    assert_eq!(rules.len(), 9);
}
