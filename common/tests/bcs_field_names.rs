//! Objects built in Rust serialise to exactly the JSON the BCS walkthrough (replayed in docs/src/walkthrough.md) shows, so
//! field names, casing and nesting are the BCS contract and not an approximation of it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;

use common::api::*;
use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

fn yaml(text: &str) -> Value {
    serde_yaml::from_str(text).expect("literal YAML")
}

fn time(s: &str) -> Time {
    Time(s.parse::<Timestamp>().expect("RFC 3339"))
}

fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([("app".to_string(), "test-gamedeployment".to_string())])
}

/// `gamedeployment.yaml` of the walkthrough, field for field.
fn walkthrough_gamedeployment() -> GameDeployment {
    let mut gd = GameDeployment::new(
        "test-gamedeployment",
        GameDeploymentSpec {
            replicas: Some(6),
            selector: LabelSelector { match_labels: Some(labels()), ..Default::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels()), ..Default::default() }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "python".into(),
                        image: Some("python:latest".into()),
                        image_pull_policy: Some("IfNotPresent".into()),
                        command: Some(vec!["python".into()]),
                        args: Some(vec!["-m".into(), "http.server".into(), "8000".into()]),
                        ports: Some(vec![ContainerPort {
                            name: Some("http".into()),
                            container_port: 8000,
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            service_name: None,
            scale_strategy: None,
            update_strategy: GameDeploymentUpdateStrategy {
                type_: GameDeploymentUpdateStrategyType::InplaceUpdate,
                partition: Some(IntOrString::Int(2)),
                max_unavailable: Some(IntOrString::Int(2)),
                max_surge: None,
                in_place_update_strategy: Some(InPlaceUpdateStrategy { grace_period_seconds: 30, policy: None }),
                ..Default::default()
            },
            pre_delete_update_strategy: Some(HookGateStrategy {
                hook: Some(HookStep { template_name: "test".into(), args: vec![] }),
                retry: false,
                hook_policy: None,
                shadow_hook: None,
            }),
            pre_inplace_update_strategy: None,
            post_inplace_update_strategy: None,
            revision_history_limit: None,
            min_ready_seconds: 30,
            progress_deadline_seconds: None,
            disable_readiness_gate: false,
            lifecycle: None,
            volume_claim_templates: Vec::new(),
        },
    );
    gd.metadata.labels = Some(labels());
    gd
}

#[test]
fn gamedeployment_spec_serialises_as_the_walkthrough_manifest() {
    let have = serde_json::to_value(walkthrough_gamedeployment()).unwrap();
    // The walkthrough's manifest as the repository ships it (examples/ is what users apply).
    let want = yaml(include_str!("../../examples/gamedeployment.yaml"));
    assert_eq!(have, want);
}

#[test]
fn gamedeployment_status_serialises_as_the_failed_hook_walkthrough() {
    let status = GameDeploymentStatus {
        available_replicas: 6,
        collision_count: Some(0),
        label_selector: Some("app=test-gamedeployment".into()),
        observed_generation: Some(2),
        pre_delete_hook_condition: vec![HookCondition {
            phase: HookPhase::Failed,
            pod_name: "test-gamedeployment-f9tkt".into(),
            start_time: time("2020-11-19T10:25:17Z"),
            hook_run: None,
            message: None,
            released_by: None,
            released_at: None,
        }],
        ready_replicas: 6,
        replicas: 6,
        update_revision: Some("test-gamedeployment-67864c6f65".into()),
        updated_ready_replicas: 6,
        updated_replicas: 6,
        ..Default::default()
    };
    let want = yaml(
        r#"
availableReplicas: 6
collisionCount: 0
labelSelector: app=test-gamedeployment
observedGeneration: 2
preDeleteHookCondition:
- phase: Failed
  podName: test-gamedeployment-f9tkt
  startTime: "2020-11-19T10:25:17Z"
readyReplicas: 6
replicas: 6
updateRevision: test-gamedeployment-67864c6f65
updatedReadyReplicas: 6
updatedReplicas: 6
"#,
    );
    assert_eq!(serde_json::to_value(status).unwrap(), want);
}

#[test]
fn hookrun_serialises_as_the_args_walkthrough() {
    let mut run = HookRun::new(
        "test-gamedeployment-767bfd8bcc-94pn2-test",
        HookRunSpec {
            args: vec![
                Argument::new("PodIP", "1.1.1.1"),
                Argument::new("PodName", "test-gamedeployment-94pn2"),
                Argument::new("PodNamespace", "default"),
                Argument::new("service-name", "test-gamedeployment-svc.default.svc.cluster.local"),
            ],
            metrics: vec![Metric {
                count: 3,
                failure_limit: 2,
                interval: Some("60s".into()),
                name: "webtest".into(),
                provider: MetricProvider {
                    web: Some(WebMetric {
                        json_path: Some("{$.age}".into()),
                        url: "http://{{ args.PodIP }}:9091".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                success_condition: Some("asInt(result) > 30".into()),
                ..Default::default()
            }],
            terminate: false,
            policy: None,
        },
    );
    run.metadata.namespace = Some("default".into());
    run.status = Some(HookRunStatus {
        metric_results: vec![MetricResult {
            count: 1,
            measurements: vec![Measurement {
                finished_at: Some(time("2020-11-20T01:46:55Z")),
                phase: Some(HookPhase::Successful),
                started_at: Some(time("2020-11-20T01:46:55Z")),
                value: Some("32".into()),
                ..Default::default()
            }],
            name: "webtest".into(),
            phase: Some(HookPhase::Running),
            successful: 1,
            ..Default::default()
        }],
        phase: Some(HookPhase::Running),
        started_at: Some(time("2020-11-20T01:46:55Z")),
        message: None,
    });
    let want = yaml(
        r#"
apiVersion: tkex.tencent.com/v1alpha1
kind: HookRun
metadata:
  name: test-gamedeployment-767bfd8bcc-94pn2-test
  namespace: default
spec:
  args:
  - name: PodIP
    value: 1.1.1.1    # fake IP
  - name: PodName
    value: test-gamedeployment-94pn2
  - name: PodNamespace
    value: default
  - name: service-name
    value: test-gamedeployment-svc.default.svc.cluster.local
  metrics:
  - count: 3
    failureLimit: 2
    interval: 60s
    name: webtest
    provider:
      web:
        jsonPath: '{$.age}'
        url: http://{{ args.PodIP }}:9091
    successCondition: asInt(result) > 30
status:
  metricResults:
  - count: 1
    measurements:
    - finishedAt: "2020-11-20T01:46:55Z"
      phase: Successful
      startedAt: "2020-11-20T01:46:55Z"
      value: "32"
    name: webtest
    phase: Running
    successful: 1
  phase: Running
  startedAt: "2020-11-20T01:46:55Z"
"#,
    );
    assert_eq!(serde_json::to_value(&run).unwrap(), want);
    // And back: the seed's YAML reads into the same value.
    let parsed: HookRun = serde_json::from_value(want).unwrap();
    assert_eq!(parsed, run);
}

#[test]
fn defaults_are_the_bcs_defaults() {
    let spec: GameDeploymentSpec = serde_json::from_value(serde_json::json!({
        "selector": {"matchLabels": {"app": "x"}},
        "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    }))
    .unwrap();
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(spec.revision_history_limit, Some(10));
    assert_eq!(spec.update_strategy.type_, GameDeploymentUpdateStrategyType::RollingUpdate);
    assert_eq!(spec.update_strategy.max_unavailable, Some(IntOrString::String("20%".into())));
    assert_eq!(spec.update_strategy.max_surge, Some(IntOrString::Int(0)));
    let template: HookTemplateSpec = serde_json::from_value(serde_json::json!({"metrics": []})).unwrap();
    assert_eq!(template.policy, Some(HookPolicy::Parallel));
}
