//! Fault injection: errors and latency per verb/resource, forced conflicts, dropped watches,
//! configured by flags (`SimConfig::faults`) or at runtime through `/kube-sim/faults`.

use anyhow::Result;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube_sim::{FaultConfig, FaultRule, SimConfig};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn injected_errors_latency_conflicts_and_dropped_watches() -> Result<()> {
    let faults = FaultConfig {
        rules: vec![FaultRule {
            verbs: vec!["list".into()],
            resources: vec!["secrets".into()],
            error_rate: 1.0,
            error_code: Some(503),
            ..Default::default()
        }],
    };
    let sim = sim_with(SimConfig { kubelet: None, faults, ..SimConfig::default() }).await?;
    let client = sim.client().await;
    let raw = Raw::new(&sim);
    let r = raw.get("/api/v1/namespaces/default/secrets").await?;
    assert_eq!((r.status, r.body["reason"].as_str()), (503, Some("ServiceUnavailable")));
    assert_eq!(raw.get("/api/v1/namespaces/default/configmaps").await?.status, 200, "other resources unaffected");

    // Runtime configuration through the admin API: conflicts on every update of configmaps.
    let rules = json!({"rules": [{"verbs": ["patch", "update"], "resources": ["configmaps"], "conflictRate": 1.0, "latencyMs": 50}]});
    let set = raw.put("/kube-sim/faults", &rules).await?;
    assert_eq!(set.status, 200);
    assert_eq!(raw.get("/kube-sim/faults").await?.body["rules"][0]["conflictRate"], 1.0);
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "c"}}))?).await?;
    let started = std::time::Instant::now();
    let err = api_error(cms.patch("c", &PatchParams::default(), &Patch::Merge(json!({"data": {"a": "b"}}))).await)?;
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(started.elapsed() >= std::time::Duration::from_millis(50), "latency is added before the error");
    cms.list(&ListParams::default()).await?;
    assert_eq!(raw.delete("/kube-sim/faults", None).await?.status, 200);
    cms.patch("c", &PatchParams::default(), &Patch::Merge(json!({"data": {"a": "b"}}))).await?;

    // Dropped watches: every open watch ends.
    let mut w = raw.watch("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1").await?;
    let _ = w.next_event().await?;
    let dropped = raw.post("/kube-sim/faults/drop-watches", &json!({})).await?;
    assert!(dropped.body["dropped"].as_u64().unwrap_or(0) >= 1);
    let mut ended = false;
    for _ in 0..10 {
        if w.next().await?.is_none() {
            ended = true;
            break;
        }
    }
    assert!(ended, "the dropped watch ends");
    // Watches cut after a configured time.
    raw.put("/kube-sim/faults", &json!({"rules": [{"verbs": ["watch"], "watchDropAfterMs": 200}]})).await?;
    let rv = raw.configmaps_version().await?;
    let mut cut = raw.watch(&format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}")).await?;
    assert!(cut.next().await?.is_none(), "the watch ends after watchDropAfterMs");
    sim.shutdown().await;
    Ok(())
}

/// Partitioning ONE client: rules scoped to a user make every request of that user fail and
/// close its open watches, or (blackhole) hang its requests and silence its watches until the
/// rule goes, while another user keeps working throughout.
#[tokio::test]
async fn rules_scoped_to_one_user_partition_that_client_only() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let token = |user: &str| {
        sim.add_token_user(kube_sim::TokenUser {
            user: user.into(),
            groups: vec!["system:masters".into()],
            ..Default::default()
        })
    };
    let (ta, tb) = (token("operator-a"), token("operator-b"));
    let a: Api<ConfigMap> = Api::default_namespaced(sim.client_for_token(&ta).await?);
    let b: Api<ConfigMap> = Api::default_namespaced(sim.client_for_token(&tb).await?);
    let cm = |name: &str| -> Result<ConfigMap> { Ok(serde_json::from_value(json!({"metadata": {"name": name}}))?) };
    let auth_a = format!("Bearer {ta}");
    let auth_b = format!("Bearer {tb}");

    // Errors: operator-a's requests fail (resources and discovery), its open watch is closed.
    let mut watch_a = raw
        .watch_with("/api/v1/namespaces/default/configmaps?watch=true", &[("Authorization", auth_a.as_str())])
        .await?;
    a.create(&PostParams::default(), &cm("before")?).await?;
    assert_eq!(watch_a.next_event().await?["object"]["metadata"]["name"], "before");
    // 500: kube-rs retries 503, 429 and 504 with back-off by itself.
    raw.put("/kube-sim/faults", &json!({"rules": [{"users": ["operator-a"], "errorRate": 1.0}]})).await?;
    assert!(watch_a.next().await?.is_none(), "operator-a's open watch is closed");
    let e = api_error(a.create(&PostParams::default(), &cm("a1")?).await)?;
    assert_eq!((e.code, e.reason.as_str()), (500, "InternalError"));
    let version = raw.send_with("GET", "/version", None, None, &[("Authorization", auth_a.as_str())]).await?;
    assert_eq!(version.status, 500, "non-resource requests of that client fail too");
    b.create(&PostParams::default(), &cm("b1")?).await?;
    assert_eq!(raw.send_with("GET", "/version", None, None, &[("Authorization", auth_b.as_str())]).await?.status, 200);
    assert_eq!(raw.get("/api/v1/namespaces/default/configmaps/b1").await?.status, 200, "the admin is unaffected");

    // Blackhole: operator-b's requests hang, its watch delivers nothing until the rule goes.
    let mut watch_b = raw
        .watch_with("/api/v1/namespaces/default/configmaps?watch=true", &[("Authorization", auth_b.as_str())])
        .await?;
    assert_eq!(watch_b.next_event().await?["type"], "ADDED"); // the initial state
    while watch_b.next_with_timeout(std::time::Duration::from_millis(300)).await?.is_some() {}
    raw.put("/kube-sim/faults", &json!({"rules": [{"users": ["operator-b"], "blackhole": true}]})).await?;
    let impatient = reqwest::Client::builder().timeout(std::time::Duration::from_millis(500)).build()?;
    let gave_up = impatient
        .post(format!("{}/api/v1/namespaces/default/configmaps", sim.url()))
        .header("Authorization", &auth_b)
        .json(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "never"}}))
        .send()
        .await;
    assert!(gave_up.is_err_and(|e| e.is_timeout()), "a blackholed request is never answered");
    let patient = {
        let b = b.clone();
        tokio::spawn(async move {
            b.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "late"}}))?)
                .await
                .map_err(anyhow::Error::from)
        })
    };
    a.create(&PostParams::default(), &cm("while-partitioned")?).await?; // operator-a is healed (rules replaced)
    assert!(
        watch_b.next_with_timeout(std::time::Duration::from_millis(500)).await?.is_none(),
        "operator-b's watch is silent while blackholed"
    );
    assert!(!patient.is_finished());
    raw.delete("/kube-sim/faults", None).await?;
    let created = patient.await??;
    assert_eq!(created.metadata.name.as_deref(), Some("late"), "a held request proceeds once the rule goes");
    let seen = watch_b.next_event().await?;
    assert_eq!(seen["object"]["metadata"]["name"], "while-partitioned", "the silenced watch resumes where it was");
    assert_eq!(raw.get("/api/v1/namespaces/default/configmaps/never").await?.status, 404);

    // The audit log tells the two clients apart.
    let log = sim.audit();
    let by = |user: &str, name: &str| {
        log.items.iter().filter(|e| e.user == user && e.name == name).cloned().collect::<Vec<_>>()
    };
    let creates_a: Vec<u16> =
        log.items.iter().filter(|e| e.user == "operator-a" && e.verb == "create").map(|e| e.code).collect();
    assert_eq!(creates_a, [201, 500, 201]);
    assert_eq!(by("operator-b", "b1").iter().map(|e| e.code).collect::<Vec<_>>(), [201]);
    let abandoned = log.items.iter().find(|e| e.user == "operator-b" && e.verb == "create" && e.code == 0);
    assert!(abandoned.is_some(), "the request the client gave up on is recorded with code 0: {log:?}");
    let late = by("operator-b", "late");
    assert_eq!(late.len(), 1);
    assert_eq!(late[0].resource_version, created.metadata.resource_version);
    assert!(late[0].stage_timestamp.duration_since(late[0].request_received_timestamp).as_secs_f64() >= 0.4);
    sim.shutdown().await;
    Ok(())
}

/// The faults a controller meets on a real cluster that a plain error rate does not show: a watch
/// resumed from a version the watch cache no longer has (`410 Gone`: the client must relist), and
/// a request timeout after the write was carried out (`504`: the client cannot tell). Both scoped
/// to one user; `SimHandle::fault_counts` counts what was injected.
#[tokio::test]
async fn expired_watches_and_timeouts_after_writes() -> Result<()> {
    let sim = sim().await?;
    let raw = Raw::new(&sim);
    let token = sim.add_token_user(kube_sim::TokenUser {
        user: "operator-a".into(),
        groups: vec!["system:masters".into()],
        ..Default::default()
    });
    let auth = format!("Bearer {token}");
    let auth = [("Authorization", auth.as_str())];
    let rules = json!({"rules": [{"users": ["operator-a"], "watchExpireRate": 1.0, "timeoutRate": 1.0}]});
    assert_eq!(raw.put("/kube-sim/faults", &rules).await?.status, 200);

    // A create carried out, answered 504.
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "maybe"}});
    let r = raw
        .send_with(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            Some("application/json"),
            Some(body.to_string()),
            &auth,
        )
        .await?;
    assert_eq!((r.status, r.body["reason"].as_str()), (504, Some("Timeout")), "{}", r.text);
    assert!(r.body["message"].as_str().unwrap_or("").contains("may still be processing"), "{}", r.text);
    let stored = raw.get("/api/v1/namespaces/default/configmaps/maybe").await?;
    assert_eq!(stored.status, 200, "the write happened");
    let rv = stored.body["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string();
    // Reads are answered.
    let r = raw.send_with("GET", "/api/v1/namespaces/default/configmaps/maybe", None, None, &auth).await?;
    assert_eq!(r.status, 200);

    // A watch from a resourceVersion: one ERROR event, 410 Expired, then the stream ends.
    let path = format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}");
    let mut w = raw.watch_with(&path, &auth).await?;
    let event = w.next_event().await?;
    assert_eq!((event["type"].as_str(), event["object"]["code"].as_u64()), (Some("ERROR"), Some(410)), "{event}");
    assert_eq!(event["object"]["reason"], "Expired");
    assert!(w.next().await?.is_none());
    // A watch without a version (the client relisted) works; the admin's resumed watch too.
    let mut fresh = raw.watch_with("/api/v1/namespaces/default/configmaps?watch=true", &auth).await?;
    assert_eq!(fresh.next_event().await?["type"], "ADDED");
    let mut admin = raw.watch(&path).await?;
    raw.post("/api/v1/namespaces/default/configmaps", &json!({"metadata": {"name": "later"}})).await?;
    assert_eq!(admin.next_event().await?["object"]["metadata"]["name"], "later");

    let counts = sim.fault_counts();
    assert_eq!((counts.timeouts_after_write, counts.watches_expired), (1, 1), "{counts:?}");
    sim.shutdown().await;
    Ok(())
}
