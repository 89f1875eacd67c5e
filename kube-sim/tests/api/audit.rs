//! The audit log of write requests (`SimHandle::audit`, `GET /kube-sim/audit`).

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_sim::{AuditEvent, AuditLog, SimConfig};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn every_write_is_audited_with_user_times_object_version_and_code() -> Result<()> {
    let sim = sim_with(SimConfig { kubelet: None, audit_capacity: 1000, ..SimConfig::default() }).await?;
    let raw = Raw::new(&sim);
    let token = sim.add_token_user(kube_sim::TokenUser {
        user: "writer".into(),
        groups: vec!["system:masters".into()],
        ..Default::default()
    });
    let client = sim.client_for_token(&token).await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let start = sim.audit().items.last().map_or(0, |e| e.id);

    let now = k8s_openapi::jiff::Timestamp::now();
    let before = k8s_openapi::jiff::Timestamp::from_microsecond(now.as_microsecond())?;
    let created = cms
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"generateName": "gen-"}}))?)
        .await?;
    let name = created.metadata.name.clone().context("name")?;
    let patched = cms.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"data": {"a": "1"}}))).await?;
    let mut replaced = patched.clone();
    replaced.data = Some([("a".to_string(), "2".to_string())].into());
    let replaced = cms.replace(&name, &PostParams::default(), &replaced).await?;
    cms.create(
        &PostParams { dry_run: true, ..Default::default() },
        &serde_json::from_value(json!({"metadata": {"name": "dry"}}))?,
    )
    .await?;
    cms.get(&name).await?; // reads are not audited
    cms.list(&ListParams::default()).await?;
    let conflict =
        cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": name}}))?).await;
    assert!(conflict.is_err());
    cms.delete(&name, &DeleteParams::default()).await?;
    // Impersonation and failed authentication.
    raw.send_with(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        Some(json!({"metadata": {"name": "as-bob"}}).to_string()),
        &[("Impersonate-User", "bob"), ("Impersonate-Group", "system:masters"), ("User-Agent", "audit-test/1.0")],
    )
    .await?;
    let unauthorized = raw.send_as("nope", "DELETE", "/api/v1/namespaces/default/configmaps/as-bob", None).await?;
    assert_eq!(unauthorized.status, 401);
    raw.delete("/api/v1/namespaces/default/configmaps", None).await?; // deletecollection
    let after = k8s_openapi::jiff::Timestamp::now();

    let log = sim.audit_since(start);
    let summary: Vec<(String, String, String, u16, bool)> =
        log.items.iter().map(|e| (e.user.clone(), e.verb.clone(), e.name.clone(), e.code, e.dry_run)).collect();
    let w =
        |verb: &str, n: &str, code: u16, dry: bool| ("writer".to_string(), verb.to_string(), n.to_string(), code, dry);
    assert_eq!(
        summary,
        [
            w("create", &name, 201, false),
            w("patch", &name, 200, false),
            w("update", &name, 200, false),
            w("create", "dry", 201, true),
            w("create", "", 409, false),
            w("delete", &name, 200, false),
            ("bob".to_string(), "create".to_string(), "as-bob".to_string(), 201, false),
            (String::new(), "delete".to_string(), "as-bob".to_string(), 401, false),
            ("kube-sim-admin".to_string(), "deletecollection".to_string(), String::new(), 200, false),
        ]
    );
    let e: &AuditEvent = &log.items[0];
    assert_eq!(e.resource_version, created.metadata.resource_version);
    assert_eq!(log.items[1].resource_version, patched.metadata.resource_version);
    assert_eq!(log.items[2].resource_version, replaced.metadata.resource_version);
    assert!(log.items[5].resource_version.is_some(), "a delete records the version it produced");
    assert_eq!(log.items[4].resource_version, None, "failed writes produce no version");
    assert_eq!(
        (e.resource.as_str(), e.api_group.as_str(), e.api_version.as_str(), e.namespace.as_str()),
        ("configmaps", "", "v1", "default")
    );
    assert!(e.request_uri.starts_with("POST /api/v1/namespaces/default/configmaps"), "{}", e.request_uri);
    assert!(e.groups.contains(&"system:masters".to_string()));
    assert!(!e.audit_id.is_empty());
    for e in &log.items {
        assert!(before <= e.request_received_timestamp && e.request_received_timestamp <= e.stage_timestamp);
        assert!(e.stage_timestamp <= after);
    }
    assert_eq!(log.items[6].impersonated_by.as_deref(), Some("kube-sim-admin"));
    assert_eq!(log.items[6].user_agent, "audit-test/1.0");

    // The same over HTTP, incrementally.
    let r = raw.get(&format!("/kube-sim/audit?since={}", log.items[7].id)).await?;
    assert_eq!(r.status, 200);
    let served: AuditLog = serde_json::from_value(r.body)?;
    assert_eq!(served.items, log.items[8..].to_vec());
    let nobody = sim.add_token_user(kube_sim::TokenUser { user: "nobody".into(), ..Default::default() });
    let forbidden = raw.send_as(&nobody, "GET", "/kube-sim/audit", None).await?;
    assert_eq!(forbidden.status, 403, "only admins read the audit log");
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn the_audit_log_is_bounded_and_subresource_writes_are_included() -> Result<()> {
    let sim = sim_with(SimConfig { kubelet: None, audit_capacity: 3, ..SimConfig::default() }).await?;
    let client = sim.client().await;
    let gs = install_test_crd(&client).await?;
    gs.create(&PostParams::default(), &gameserver("g")).await?;
    gs.patch_status("g", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Up"}}))).await?;
    gs.patch_scale("g", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))).await?;
    let log = sim.audit();
    assert_eq!(log.items.len(), 3);
    assert!(log.dropped >= 1, "the CRD create was evicted: {log:?}");
    let subresources: Vec<Option<&str>> = log.items.iter().map(|e| e.subresource.as_deref()).collect();
    assert_eq!(subresources, [None, Some("status"), Some("scale")]);
    assert!(log.items.iter().all(|e| e.resource == "gameservers" && e.api_group == "sim.kube-sim.test"));
    assert!(log.items[2].resource_version.is_some());
    sim.shutdown().await;
    Ok(())
}
